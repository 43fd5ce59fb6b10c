package grpcmaglev_test

// Real gRPC servers and clients on 127.0.0.1 for the end-to-end tests:
// each server runs the interop TestService, answering UnaryCall with its own
// address in SimpleResponse.Hostname, and the standard health service; each
// client resolves through resolver/manual.

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/grpcmaglev"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/resolver/ringhash"
)

// Bounds of the tests' waits. They are generous because the machines that
// run the tests may be slow and loaded; none is a timing assertion except
// failoverBound, which TestHardStop states.
const (
	rpcTimeout    = 10 * time.Second // one RPC, queueing included
	settleTimeout = 15 * time.Second // the client noticing a change
	pollInterval  = 5 * time.Millisecond
)

// testBackoff makes a client retry failed connections within half a second,
// so that a restarted server is found quickly (grpc's default backoff grows
// to two minutes).
var testBackoff = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 5 * time.Second,
})

// A server is one backend: a gRPC server on 127.0.0.1.
type server struct {
	addr    string
	srv     *grpc.Server
	health  *health.Server
	svc     *testService
	accepts *atomic.Int64 // connections accepted
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// testService answers UnaryCall with the server's name, after an optional
// delay, counting the calls in flight and their peak. With a gate, each
// call waits at the gate before the delay.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	name     string
	delay    atomic.Int64 // nanoseconds
	gate     atomic.Pointer[gate]
	inFlight atomic.Int64
	peak     atomic.Int64 // the most calls in flight, counting each as it arrives
	served   atomic.Int64
}

// A gate holds the calls of the servers it is set on: each sends its
// server's name on arrived, then waits until release is closed.
type gate struct {
	arrived chan string // buffered for every call the test makes
	release chan struct{}
}

func (s *testService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	if g := s.gate.Load(); g != nil {
		g.arrived <- s.name
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.served.Add(1)
	return &testgrpc.SimpleResponse{Hostname: s.name}, nil
}

// startServer starts a server listening on addr ("127.0.0.1:0" for a fresh
// port), stopped at the end of the test.
func startServer(t testing.TB, addr string, delay time.Duration, opts ...grpc.ServerOption) *server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &server{
		addr:    lis.Addr().String(),
		srv:     grpc.NewServer(opts...),
		health:  health.NewServer(),
		accepts: new(atomic.Int64),
	}
	s.svc = &testService{name: s.addr}
	s.svc.delay.Store(int64(delay))
	testgrpc.RegisterTestServiceServer(s.srv, s.svc)
	healthgrpc.RegisterHealthServer(s.srv, s.health)
	go func() {
		// Serve returns nil after Stop, so this reports only a failure
		// while the test runs.
		if err := s.srv.Serve(countingListener{lis, s.accepts}); err != nil {
			t.Errorf("serve %s: %v", s.addr, err)
		}
	}()
	t.Cleanup(s.srv.Stop)
	return s
}

// startServers starts n servers on fresh ports.
func startServers(t testing.TB, n int, delay time.Duration, opts ...grpc.ServerOption) []*server {
	t.Helper()
	ss := make([]*server, n)
	for i := range ss {
		ss[i] = startServer(t, "127.0.0.1:0", delay, opts...)
	}
	return ss
}

// setServing sets the server's health status for every service.
func (s *server) setServing(serving bool) {
	st := healthgrpc.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthgrpc.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
}

// drainAge makes servers drain every connection (GOAWAY) after about age.
func drainAge(age time.Duration) grpc.ServerOption {
	return grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: 10 * time.Second})
}

// endpoints returns one endpoint per server, at its address.
func endpoints(ss []*server) []resolver.Endpoint {
	es := make([]resolver.Endpoint, len(ss))
	for i, s := range ss {
		es[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: s.addr}}}
	}
	return es
}

// serviceConfig returns a service config choosing the policy with the given
// fields, and client-side health checks if health is set.
func serviceConfig(fields string, health bool) string {
	hc := ""
	if health {
		hc = `, "healthCheckConfig": {"serviceName": ""}`
	}
	return fmt.Sprintf(`{"loadBalancingConfig": [{"maglev": {%s}}]%s}`, fields, hc)
}

// A client is a channel using the policy, and its manual resolver.
type client struct {
	cc  *grpc.ClientConn
	tc  testgrpc.TestServiceClient
	res *manual.Resolver
}

// newClient returns a client of the given endpoints with the given service
// config and dial options, connecting at once, closed at the end of the
// test.
func newClient(t testing.TB, es []resolver.Endpoint, sc string, opts ...grpc.DialOption) *client {
	t.Helper()
	r := manual.NewBuilderWithScheme("maglevtest")
	r.InitialState(resolver.State{Endpoints: es})
	return dial(t, r, sc, opts...)
}

// dial returns a client resolved by r, with the given service config and
// dial options, connecting at once, closed at the end of the test.
func dial(t testing.TB, r *manual.Resolver, sc string, opts ...grpc.DialOption) *client {
	t.Helper()
	cc, err := grpc.NewClient(r.Scheme()+":///fleet", append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc),
		testBackoff,
	}, opts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { closeConn(t, cc) })
	cc.Connect()
	return &client{cc: cc, tc: testgrpc.NewTestServiceClient(cc), res: r}
}

// closeConn closes cc, failing the test if that fails.
func closeConn(t testing.TB, cc *grpc.ClientConn) {
	t.Helper()
	if err := cc.Close(); err != nil {
		t.Errorf("closing the client: %v", err)
	}
}

// How an RPC carries its key.
type via int

const (
	viaHeader  via = iota // the x-user metadata header
	viaWithKey            // WithKey
	viaNone               // no key: ctx as given
)

// call makes one fail-fast UnaryCall with the key and returns the name of
// the server that answered.
func (c *client) call(ctx context.Context, key string, v via, opts ...grpc.CallOption) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	switch v {
	case viaHeader:
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", key)
	case viaWithKey:
		ctx = grpcmaglev.WithKey(ctx, key)
	}
	resp, err := c.tc.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
	if err != nil {
		return "", err
	}
	return resp.GetHostname(), nil
}

// keys returns n distinct keys.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("user-%d", i)
	}
	return ks
}

// tableOf returns the library's table for the servers, named by address,
// all with weight 1, at the default size and hasher.
// tableDown is tableOf(ss) with the servers down out of service, as the
// balancer computes it (maglev.Table.Without).
func tableDown(t testing.TB, ss []*server, down ...*server) *maglev.Table {
	t.Helper()
	names := make([]string, len(down))
	for i, s := range down {
		names[i] = s.addr
	}
	tb, err := tableOf(t, ss).Without(names...)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func tableOf(t testing.TB, ss []*server) *maglev.Table {
	t.Helper()
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.addr
	}
	tb, err := maglev.New(names, maglev.DefaultSize, maglev.XXH3Seed(0))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// checkRouting calls every key reps times through v and fails the test
// unless each call succeeds at the server want names for it (want maps a
// table name to a server name; nil is the identity).
func checkRouting(t testing.TB, c *client, tb *maglev.Table, ks []string, reps int, v via, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	bad := 0
	for _, k := range ks {
		owner := tb.Lookup(k)
		if want != nil {
			owner = want[owner]
		}
		for range reps {
			got, err := c.call(ctx, k, v)
			if err != nil || got != owner {
				if bad++; bad <= 5 {
					t.Errorf("key %q: got server %q, err %v; want %q", k, got, err, owner)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d calls went astray", bad, len(ks)*reps)
	}
}

// waitRouted polls with fail-fast calls of key until one succeeds at the
// server want, and returns how long that took. It fails the test after
// settleTimeout.
func waitRouted(t testing.TB, c *client, key, want string) time.Duration {
	t.Helper()
	start := time.Now()
	var got string
	var err error
	for time.Since(start) < settleTimeout {
		if got, err = c.call(context.Background(), key, viaWithKey); err == nil && got == want {
			return time.Since(start)
		}
		time.Sleep(pollInterval)
	}
	t.Fatalf("key %q still reaches %q (err %v) after %v; want %q", key, got, err, settleTimeout, want)
	return 0
}

// keyOwnedBy returns a key among ks that tb gives to name.
func keyOwnedBy(t testing.TB, tb *maglev.Table, ks []string, name string) string {
	t.Helper()
	for _, k := range ks {
		if tb.Lookup(k) == name {
			return k
		}
	}
	t.Fatalf("no key owned by %s", name)
	return ""
}

// named gives each server the table name "server-<i>" through its
// endpoint's ring-hash hash key, and returns the endpoints, the names, and
// the map from name to server address that checkRouting takes. Tests that
// count the slots a change moves use it: with the servers' addresses as
// names, which the free ports the OS hands out choose, Maglev's excess
// over the changed server's own slots is random, above 1% for about one
// set of five names in 500.
func named(ss []*server) (es []resolver.Endpoint, names []string, toServer map[string]string) {
	es = endpoints(ss)
	names = make([]string, len(ss))
	toServer = make(map[string]string, len(ss))
	for i, s := range ss {
		names[i] = fmt.Sprintf("server-%d", i)
		es[i] = ringhash.SetHashKey(es[i], names[i])
		toServer[names[i]] = s.addr
	}
	return es, names, toServer
}

// tableOfNames returns the table the policy's default config builds over
// names.
func tableOfNames(t testing.TB, names []string) *maglev.Table {
	t.Helper()
	tb, err := maglev.New(names, maglev.DefaultSize, maglev.XXH3Seed(0))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// without returns ss without s.
func without(ss []*server, s *server) []*server {
	var out []*server
	for _, x := range ss {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
