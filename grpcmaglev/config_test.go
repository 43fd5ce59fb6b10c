package grpcmaglev_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"github.com/maglevlb/maglev/grpcmaglev"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/resolver/ringhash"
	"google.golang.org/grpc/status"
)

func parser(t *testing.T) balancer.ConfigParser {
	t.Helper()
	b := balancer.Get(grpcmaglev.Name)
	if b == nil {
		t.Fatalf("no balancer registered as %q", grpcmaglev.Name)
	}
	p, ok := b.(balancer.ConfigParser)
	if !ok {
		t.Fatalf("the %q builder does not parse configs", grpcmaglev.Name)
	}
	return p
}

// TestParseConfigGood: valid configs parse, and make a client whose
// routing follows them (TestAffinityConfig checks the routing).
func TestParseConfigGood(t *testing.T) {
	if grpcmaglev.Name != "maglev" {
		t.Fatalf("Name = %q", grpcmaglev.Name)
	}
	p := parser(t)
	for _, js := range []string{
		`{}`,
		`{"requestHashHeader": "x-user", "tableSize": 65537, "seed": 0}`,
		`{"requestHashHeader": "X-User_1.a"}`,
		`{"requestHashHeader": ""}`,
		`{"tableSize": 2}`,
		`{"tableSize": 16777259}`, // maglev.MaxSize
		`{"seed": 18446744073709551615}`,
		`{"requestHashHeader": null, "tableSize": null, "seed": null, "balanceFactor": null}`,
		`{"balanceFactor": 0}`,
		`{"balanceFactor": 0.0}`,
		`{"balanceFactor": 1}`,
		`{"balanceFactor": 1.25}`,
		`{"balanceFactor": 2e3}`,
		`{"envoyCompatible": true, "balanceFactor": 1.25, "tableSize": 17}`,
		`null`, // like {}
	} {
		if _, err := p.ParseConfig([]byte(js)); err != nil {
			t.Errorf("ParseConfig(%s): %v", js, err)
		}
	}
}

// TestParseConfigBad: every bad field is rejected with an error that starts
// with "grpcmaglev: invalid config: ", names the field, and wraps
// ErrInvalidConfig (and, for a bad size or factor, the maglev error).
func TestParseConfigBad(t *testing.T) {
	p := parser(t)
	for _, c := range []struct {
		js    string
		field string
		is    error // also wrapped, besides ErrInvalidConfig
		text  string
	}{
		{`{"tableSize": 100}`, "tableSize", maglev.ErrSize, "100"},
		{`{"tableSize": 65536}`, "tableSize", maglev.ErrSize, "65536"},
		{`{"tableSize": 1}`, "tableSize", maglev.ErrSize, "1"},
		{`{"tableSize": 0}`, "tableSize", maglev.ErrSize, "0"},
		{`{"tableSize": -7}`, "tableSize", maglev.ErrSize, "-7"},
		{`{"tableSize": 16777289}`, "tableSize", maglev.ErrSize, "16777289"}, // prime > MaxSize
		{`{"tableSize": 99999999999999999999999}`, "tableSize", maglev.ErrSize, "99999999999999999999999"},
		{`{"tableSize": 65537.5}`, "tableSize", nil, "integer"},
		{`{"tableSize": 6.5537e4}`, "tableSize", nil, "integer"},
		{`{"tableSize": "65537"}`, "tableSize", nil, "JSON number"},
		{`{"requestHashHeader": "x-user-bin"}`, "requestHashHeader", nil, "-bin"},
		{`{"requestHashHeader": "X-User-Bin"}`, "requestHashHeader", nil, "-bin"},
		{`{"requestHashHeader": "x user"}`, "requestHashHeader", nil, "not a metadata key"},
		{`{"requestHashHeader": ":path"}`, "requestHashHeader", nil, "not a metadata key"},
		{`{"requestHashHeader": "ключ"}`, "requestHashHeader", nil, "not a metadata key"},
		{`{"requestHashHeader": 42}`, "requestHashHeader", nil, "JSON string"},
		{`{"seed": -1}`, "seed", nil, "integer from 0"},
		{`{"seed": 1.5}`, "seed", nil, "integer from 0"},
		{`{"seed": 18446744073709551616}`, "seed", nil, "integer from 0"},
		{`{"seed": "1"}`, "seed", nil, "JSON number"},
		{`{"balanceFactor": 0.5}`, "balanceFactor", bounded.ErrBalanceFactor, "balanceFactor: balance factor must be 0 (off) or a finite number ≥ 1: 0.5"},
		{`{"balanceFactor": 0.999999}`, "balanceFactor", bounded.ErrBalanceFactor, "0.999999"},
		{`{"balanceFactor": -1.25}`, "balanceFactor", bounded.ErrBalanceFactor, "-1.25"},
		{`{"balanceFactor": 1e400}`, "balanceFactor", bounded.ErrBalanceFactor, "1e400"},
		{`{"balanceFactor": "1.25"}`, "balanceFactor", nil, "JSON number"},
		{`{"balanceFactor": true}`, "balanceFactor", nil, "JSON number"},
		{`{"balancefactor": 1.25}`, "balancefactor", nil, "unknown field (known: balanceFactor, envoyCompatible, "},
		{`{"envoyCompatible": "true"}`, "envoyCompatible", nil, "JSON bool, got a JSON string"},
		{`{"envoyCompatible": 1}`, "envoyCompatible", nil, "JSON bool, got a JSON number"},
		{`{"envoyCompatible": true, "seed": 5}`, "seed", nil, "with envoyCompatible"},
		{`{"tablesize": 65537}`, "tablesize", nil, "unknown field"},
		{`{"TableSize": 65537}`, "TableSize", nil, "unknown field"},
		{`{"tablesize": "x"}`, "tablesize", nil, "unknown field"},
		{`{"seed": 1, "x": "y"}`, "x", nil, "unknown field"},
		{`{"tableSize": -99999999999999999999}`, "tableSize", maglev.ErrSize, "-99999999999999999999"},
		{`{"seed": -99999999999999999999}`, "seed", nil, "integer from 0"},
		{`{"seed": {}}`, "seed", nil, "JSON number, got a JSON object"},
		{`{"tableSize": [65537]}`, "tableSize", nil, "JSON number, got a JSON array"},
		{`{"requestHashHeader": ["x-user"]}`, "requestHashHeader", nil, "JSON string, got a JSON array"},
		{`[]`, "", nil, "not a JSON object"},
		{`"x"`, "", nil, "not a JSON object"},
		{`42`, "", nil, "not a JSON object"},
		{`{"seed": 1} {}`, "", nil, "after top-level value"},
		{`{"seed": 1,}`, "", nil, "not a JSON object"},
		{``, "", nil, "not a JSON object"},
	} {
		_, err := p.ParseConfig([]byte(c.js))
		if err == nil {
			t.Errorf("ParseConfig(%s) = nil error", c.js)
			continue
		}
		msg := err.Error()
		var ce *grpcmaglev.ConfigError
		switch {
		case !errors.Is(err, grpcmaglev.ErrInvalidConfig):
			t.Errorf("ParseConfig(%s) = %v: does not wrap ErrInvalidConfig", c.js, err)
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("ParseConfig(%s) = %v: does not wrap %v", c.js, err, c.is)
		case !errors.As(err, &ce) || ce.Field != c.field:
			t.Errorf("ParseConfig(%s) = %v: want a ConfigError for field %q", c.js, err, c.field)
		case !strings.HasPrefix(msg, "grpcmaglev: invalid config: "+c.field):
			t.Errorf("ParseConfig(%s) = %q: want it to start with \"grpcmaglev: invalid config: %s\"", c.js, msg, c.field)
		case !strings.Contains(msg, c.text):
			t.Errorf("ParseConfig(%s) = %q: want it to say %q", c.js, msg, c.text)
		}
	}
}

// TestNewClientBadConfig: grpc.NewClient fails with a default service
// config whose policy config is bad, and the error names the field.
func TestNewClientBadConfig(t *testing.T) {
	for _, c := range []struct{ fields, field string }{
		{`"tableSize": 65536`, "tableSize"},
		{`"tableSize": 33554467`, "tableSize"},
		{`"requestHashHeader": "x-user-bin"`, "requestHashHeader"},
		{`"balanceFactor": 0.8`, "balanceFactor"},
	} {
		cc, err := grpc.NewClient("passthrough:///127.0.0.1:1",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(serviceConfig(c.fields, false)))
		if err == nil {
			closeConn(t, cc)
			t.Errorf("grpc.NewClient with config {%s} succeeded", c.fields)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "grpcmaglev: invalid config: "+c.field) {
			t.Errorf("grpc.NewClient with config {%s}: %q does not name the field", c.fields, msg)
		}
	}
}

// TestResolverServiceConfig: a service config from the resolver whose
// policy config is bad fails RPCs with Unavailable and the field's error
// while the channel has no good service config, and is ignored once it has
// one: the channel keeps routing by the good one.
func TestResolverServiceConfig(t *testing.T) {
	ss := startServers(t, 3, 0)
	r := manual.NewBuilderWithScheme("maglevtest")
	cc, err := grpc.NewClient(r.Scheme()+":///fleet",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		testBackoff,
	)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { closeConn(t, cc) })
	cc.Connect()
	c := &client{cc: cc, tc: testgrpc.NewTestServiceClient(cc), res: r}
	state := func(sc string) resolver.State {
		return resolver.State{Endpoints: endpoints(ss), ServiceConfig: r.CC().ParseServiceConfig(sc)}
	}
	bad := serviceConfig(`"requestHashHeader": "x-user", "tableSize": 65536`, false)

	r.UpdateState(state(bad))
	_, err = c.call(context.Background(), "k", viaWithKey)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "grpcmaglev: invalid config: tableSize") {
		t.Fatalf("RPC with only a bad service config: got %v", err)
	}

	r.UpdateState(state(serviceConfig(`"requestHashHeader": "x-user"`, false)))
	tb := tableOf(t, ss)
	ks := keys(100)
	checkRouting(t, c, tb, ks, 1, viaWithKey, nil)
	r.UpdateState(state(bad))
	checkRouting(t, c, tb, ks, 1, viaWithKey, nil)
}

// TestBadResolverUpdate: endpoints that cannot name a table (two with one
// hash key) are rejected: before any good update, RPCs fail with the reason;
// after one, the policy keeps routing by the last good update.
func TestBadResolverUpdate(t *testing.T) {
	ss := startServers(t, 3, 0)
	dup := endpoints(ss)
	dup[0] = ringhash.SetHashKey(dup[0], "same")
	dup[1] = ringhash.SetHashKey(dup[1], "same")
	c := newClient(t, dup, serviceConfig(`"requestHashHeader": "x-user"`, false))
	_, err := c.call(context.Background(), "k", viaWithKey)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), `grpcmaglev: resolver update rejected: maglev: duplicate backend name: "same"`) {
		t.Fatalf("RPC with two endpoints named \"same\": got %v", err)
	}

	c.res.UpdateState(resolver.State{Endpoints: endpoints(ss)})
	tb := tableOf(t, ss)
	ks := keys(100)
	checkRouting(t, c, tb, ks, 1, viaWithKey, nil)

	// A bad update now leaves the routing as it was: the rejected list
	// would drop a server and rename another.
	bad := append(dup[:2:2], resolver.Endpoint{})
	c.res.UpdateState(resolver.State{Endpoints: bad})
	checkRouting(t, c, tb, ks, 1, viaWithKey, nil)
}

// TestResolverErrorFirst: a resolver that fails before its first update
// fails fail-fast RPCs with its error instead of leaving them waiting.
func TestResolverErrorFirst(t *testing.T) {
	r := manual.NewBuilderWithScheme("maglevtest")
	c := dial(t, r, serviceConfig(`"requestHashHeader": "x-user"`, false))
	r.CC().ReportError(errors.New("no such host"))
	_, err := c.call(context.Background(), "k", viaWithKey)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no such host") {
		t.Fatalf("RPC after a resolver error: got %v", err)
	}
}

// TestErrorPrefix: every error of the package starts with "grpcmaglev: ",
// a ConfigError's too.
func TestErrorPrefix(t *testing.T) {
	_, cfgErr := parser(t).ParseConfig([]byte(`{"tableSize": 100}`))
	for _, err := range []error{
		grpcmaglev.ErrInvalidConfig,
		grpcmaglev.ErrBadResolverUpdate,
		grpcmaglev.ErrNoUsableEndpoint,
		cfgErr,
		&grpcmaglev.ConfigError{Err: errors.New("x")},
	} {
		if msg := err.Error(); !strings.HasPrefix(msg, "grpcmaglev: ") {
			t.Errorf("error %q does not start with \"grpcmaglev: \"", msg)
		}
	}
}
