package grpcmaglev_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/envoymaglev"
	"github.com/maglevlb/maglev/grpcmaglev"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/resolver/ringhash"
	"google.golang.org/grpc/status"
)

// TestAffinity: with every server up, each of 300 keys, called repeatedly
// through the header and through WithKey, reaches the server the library's
// table names, from the first RPC on, and so does it from another client.
func TestAffinity(t *testing.T) {
	ss := startServers(t, 5, 0)
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false))
	tb := tableOf(t, ss)
	ks := keys(300)
	checkRouting(t, c, tb, ks, 3, viaHeader, nil)
	checkRouting(t, c, tb, ks, 3, viaWithKey, nil)
	// A second client, given the endpoints in another order, agrees.
	es := endpoints(ss)
	slices.Reverse(es)
	checkRouting(t, newClient(t, es, serviceConfig(`"requestHashHeader": "x-user"`, false)), tb, ks, 1, viaHeader, nil)
	// Every server owns some of the keys, so the test saw them all.
	seen := map[string]bool{}
	for _, k := range ks {
		seen[tb.Lookup(k)] = true
	}
	if len(seen) != len(ss) {
		t.Fatalf("the keys reach %d of %d servers", len(seen), len(ss))
	}
}

// TestAffinityAddresses: a resolver that gives addresses, not endpoints
// (grpc makes one endpoint of each), gets the same table.
func TestAffinityAddresses(t *testing.T) {
	ss := startServers(t, 3, 0)
	r := manual.NewBuilderWithScheme("maglevtest")
	var addrs []resolver.Address
	for _, s := range ss {
		addrs = append(addrs, resolver.Address{Addr: s.addr})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	c := dial(t, r, serviceConfig(`"requestHashHeader": "x-user"`, false))
	checkRouting(t, c, tableOf(t, ss), keys(100), 2, viaHeader, nil)
}

// TestAffinityConfig: tableSize and seed choose the table, and an
// upper-case header name in the config matches the lower-cased metadata key.
func TestAffinityConfig(t *testing.T) {
	ss := startServers(t, 4, 0)
	const size, seed = 4093, 18446744073709551557 // 2^64-59, beyond float64's exact integers
	c := newClient(t, endpoints(ss), serviceConfig(fmt.Sprintf(`"requestHashHeader": "X-User", "tableSize": %d, "seed": %d`, size, uint64(seed)), false))
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.addr
	}
	tb, err := maglev.New(names, size, maglev.XXH3Seed(seed))
	if err != nil {
		t.Fatal(err)
	}
	ks := keys(200)
	checkRouting(t, c, tb, ks, 2, viaHeader, nil)
	// The default table routes some of these keys elsewhere, so the
	// check above tells the tables apart.
	def := tableOf(t, ss)
	differ := 0
	for _, k := range ks {
		if def.Lookup(k) != tb.Lookup(k) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the configured table routes every key like the default one")
	}
}

// TestAffinityWeighted: endpoint weights and ring-hash hash keys name a
// weighted table: an endpoint with no weight attribute weighs 1, and one
// whose attribute is 0 is drained, as in maglev.NewWeighted: it owns no
// slot, and no RPC, keyed or not, reaches its server.
func TestAffinityWeighted(t *testing.T) {
	ss := startServers(t, 6, 0)
	const unset = -1
	weights := []int64{1, 2, 3, 0, 5, unset}
	hashKeys := []string{"alpha", "", "gamma", "delta", "", ""}
	es := endpoints(ss)
	var backends []maglev.Backend
	toServer := map[string]string{} // table name -> server address
	for i := range es {
		w := uint32(1)
		if weights[i] != unset {
			w = uint32(weights[i])
			es[i] = weight.Set(es[i], weight.EndpointInfo{Weight: w})
		}
		es[i] = ringhash.SetHashKey(es[i], hashKeys[i])
		name := hashKeys[i]
		if name == "" {
			name = ss[i].addr
		}
		backends = append(backends, maglev.Backend{Name: name, Weight: w})
		toServer[name] = ss[i].addr
	}
	tb, err := maglev.NewWeighted(backends, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, es, serviceConfig(`"requestHashHeader": "x-user"`, false))
	ks := keys(300)
	checkRouting(t, c, tb, ks, 2, viaHeader, toServer)
	checkRouting(t, c, tb, ks, 2, viaWithKey, toServer)
	// The weights shape the table: the weight-5 backend owns more than the
	// weight-1 ones, the one given no weight as many as weight 1, and the
	// drained one none.
	counts := tb.Counts()
	if heavy, light, unweighted := counts[tb.Index(ss[4].addr)], counts[tb.Index("alpha")], counts[tb.Index(ss[5].addr)]; heavy < 4*light || unweighted < light/2 {
		t.Fatalf("weight 5 owns %d slots, weight 1 %d, no weight %d", heavy, light, unweighted)
	}
	if n := counts[tb.Index("delta")]; n != 0 {
		t.Fatalf("the drained endpoint owns %d slots", n)
	}
	// Keyless RPCs, spread over the READY endpoints, skip the drained one.
	for range 100 {
		got, err := c.call(context.Background(), "", viaNone)
		if err != nil || got == ss[3].addr {
			t.Fatalf("an RPC with no key: %q, %v; want a server that is not drained (%s)", got, err, ss[3].addr)
		}
	}
	if n := ss[3].svc.served.Load(); n != 0 {
		t.Fatalf("the drained server served %d RPCs", n)
	}
}

// TestAffinityDrainAll: with every endpoint's weight 0 the channel routes
// nothing: RPCs fail with ErrNoUsableEndpoint, saying why; once the
// resolver gives the weights back, every key goes where the table says.
func TestAffinityDrainAll(t *testing.T) {
	ss := startServers(t, 3, 0)
	drained := endpoints(ss)
	for i := range drained {
		drained[i] = weight.Set(drained[i], weight.EndpointInfo{Weight: 0})
	}
	c := newClient(t, drained, serviceConfig(`"requestHashHeader": "x-user"`, false))
	deadline := time.Now().Add(settleTimeout)
	for _, v := range []via{viaHeader, viaNone} {
		for {
			_, err := c.call(context.Background(), "k", v)
			if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "grpcmaglev: no usable endpoint: every endpoint is drained (weight 0)") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("every endpoint drained: an RPC got %v; want Unavailable, every endpoint drained", err)
			}
			time.Sleep(pollInterval)
		}
	}
	for _, s := range ss {
		if n := s.svc.served.Load(); n != 0 {
			t.Fatalf("%s, drained, served %d RPCs", s.addr, n)
		}
	}
	c.res.UpdateState(resolver.State{Endpoints: endpoints(ss)})
	checkRouting(t, c, tableOf(t, ss), keys(100), 1, viaHeader, nil)
}

// TestAffinityEnvoy: with envoyCompatible, every key reaches the host of
// Envoy's table for the same hosts, weights and table size
// (envoymaglev.New), hashed with XXH64 as Envoy hashes a header's value;
// an endpoint of weight 0, drained, is left out, as Envoy leaves out a
// drained host.
func TestAffinityEnvoy(t *testing.T) {
	ss := startServers(t, 5, 0)
	weights := []uint32{1, 2, 3, 0, 5}
	es := endpoints(ss)
	var hosts []envoymaglev.Host
	for i := range es {
		es[i] = weight.Set(es[i], weight.EndpointInfo{Weight: weights[i]})
		if weights[i] > 0 {
			hosts = append(hosts, envoymaglev.Host{Key: ss[i].addr, Weight: weights[i]})
		}
	}
	const size = 1009
	tb, err := envoymaglev.New(hosts, size)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, es, serviceConfig(`"requestHashHeader": "x-user", "envoyCompatible": true, "tableSize": 1009`, false))
	ks := keys(300)
	checkRouting(t, c, tb, ks, 2, viaHeader, nil)
	checkRouting(t, c, tb, ks, 2, viaWithKey, nil)
	// The Envoy table differs from the policy's own: some keys route
	// differently, so the test above could tell them apart.
	ws := make([]maglev.Backend, len(hosts))
	for i, h := range hosts {
		ws[i] = maglev.Backend{Name: h.Key, Weight: h.Weight}
	}
	own, err := maglev.NewWeighted(ws, size, maglev.XXH3Seed(0))
	if err != nil {
		t.Fatal(err)
	}
	differ := 0
	for _, k := range ks {
		if own.Lookup(k) != tb.Lookup(k) {
			differ++
		}
	}
	if differ < len(ks)/2 {
		t.Fatalf("only %d of %d keys route differently under Envoy's table and hash", differ, len(ks))
	}
}

// TestKeyPrecedence: WithKey wins over the header; several header values
// are joined with ","; an RPC with no key reaches some READY server.
func TestKeyPrecedence(t *testing.T) {
	ss := startServers(t, 4, 0)
	c := newClient(t, endpoints(ss), serviceConfig(`"requestHashHeader": "x-user"`, false))
	tb := tableOf(t, ss)
	ks := keys(100)
	ctx := context.Background()

	// Two keys with different owners.
	k1, k2 := ks[0], ""
	for _, k := range ks[1:] {
		if tb.Lookup(k) != tb.Lookup(k1) {
			k2 = k
			break
		}
	}
	if k2 == "" {
		t.Fatal("all keys have one owner")
	}
	both := grpcmaglev.WithKey(metadata.AppendToOutgoingContext(ctx, "x-user", k1), k2)
	for range 10 {
		got, err := c.call(both, "", viaNone)
		if err != nil || got != tb.Lookup(k2) {
			t.Fatalf("header %q and WithKey %q: got %q, %v; want WithKey's owner %q", k1, k2, got, err, tb.Lookup(k2))
		}
	}

	// Values "a" and "b,c" of the header make the key "a,b,c".
	for i := range 50 {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d,c%d", i, i)
		md := metadata.AppendToOutgoingContext(ctx, "x-user", a, "x-user", b)
		got, err := c.call(md, "", viaNone)
		if want := tb.Lookup(a + "," + b); err != nil || got != want {
			t.Fatalf("header values %q, %q: got %q, %v; want %q", a, b, got, err, want)
		}
	}

	// No key: random READY servers, so 200 calls reach more than one of
	// the 4 (all reaching one has probability 4·4^-200).
	seen := map[string]bool{}
	for range 200 {
		got, err := c.call(ctx, "", viaNone)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Fatalf("200 calls with no key all reached %v", seen)
	}
}

// TestEmptyAndUnusedHeader: with no requestHashHeader configured, a header
// is not a key; the empty string set with WithKey is a key.
func TestEmptyAndUnusedHeader(t *testing.T) {
	ss := startServers(t, 3, 0)
	c := newClient(t, endpoints(ss), serviceConfig(``, false))
	tb := tableOf(t, ss)
	for range 5 {
		got, err := c.call(context.Background(), "", viaWithKey)
		if err != nil || got != tb.Lookup("") {
			t.Fatalf("WithKey(\"\"): got %q, %v; want %q", got, err, tb.Lookup(""))
		}
	}
	seen := map[string]bool{}
	for range 200 {
		got, err := c.call(context.Background(), "same-key", viaHeader)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Fatalf("with no requestHashHeader, one header value reached only %v: it was used as a key", seen)
	}
}
