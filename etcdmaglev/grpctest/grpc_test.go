package grpctest_test

// grpcmaglev fed by etcd's own gRPC resolver, with no code of this package
// in between: real gRPC servers register in real etcd, and a client's keys
// reach their owners over the registered Addrs, the same owners a
// Transport fed by a Watcher on the same prefix computes.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	_ "github.com/maglevlb/maglev/grpcmaglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	etcdresolver "go.etcd.io/etcd/client/v3/naming/resolver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// echoServer answers UnaryCall with its own address.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	addr string
}

func (s *echoServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: s.addr}, nil
}

// startGRPCServers starts n gRPC servers on 127.0.0.1, stopped at the end
// of the test, and returns their addresses.
func startGRPCServers(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = lis.Addr().String()
		srv := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(srv, &echoServer{addr: addrs[i]})
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
	}
	return addrs
}

func TestGRPCResolver(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/echo"
	addrs := startGRPCServers(t, 5)
	regs := make([]*etcdmaglev.Registration, len(addrs))
	for i, a := range addrs[:4] {
		r, err := etcdmaglev.Register(t.Context(), c, prefix, endpoints.Endpoint{Addr: a}, etcdmaglev.RegisterOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = r
	}

	res, err := etcdresolver.NewBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("etcd:///"+prefix,
		grpc.WithResolvers(res),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"maglev": {"requestHashHeader": "x-key"}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		etcdtest.FastReconnect[0],
	)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	tc := testgrpc.NewTestServiceClient(cc)

	// An HTTP Transport fed by a Watcher on the same prefix: its table
	// names the same backends.
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-Key")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	w, err := etcdmaglev.Watch(t.Context(), c, prefix, tr.SetEndpoints, etcdmaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()

	call := func(key string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "x-key", key), settle)
		defer cancel()
		resp, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
		return resp.GetHostname()
	}
	// check checks 500 keys against the owners over members, once every
	// server of members answers.
	check := func(members []string) {
		t.Helper()
		members = slices.Sorted(slices.Values(members))
		tb, err := maglev.New(members, maglev.DefaultSize, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, settle, fmt.Sprintf("the Transport's table over %v", members), func() bool {
			return names(w.Endpoints()) == strings.Join(members, " ")
		})
		// The gRPC channel follows the registry on its own; wait until
		// it routes by the new table, then every key must agree.
		waitFor(t, settle, fmt.Sprintf("the gRPC client's table over %v", members), func() bool {
			for i := range 50 {
				key := fmt.Sprintf("user-%d", i)
				if call(key) != tb.Lookup(key) {
					return false
				}
			}
			return true
		})
		for i := range 500 {
			key := fmt.Sprintf("user-%d", i)
			want := tb.Lookup(key)
			if got := call(key); got != want {
				t.Fatalf("gRPC: key %s reached %s, its owner over %v is %s", key, got, members, want)
			}
			if b, ok := tr.Lookup(key); !ok || b.Name != want {
				t.Fatalf("HTTP: key %s goes to %q, its owner over %v is %s", key, b.Name, members, want)
			}
		}
	}
	check(addrs[:4])

	r, err := etcdmaglev.Register(t.Context(), c, prefix, endpoints.Endpoint{Addr: addrs[4]}, etcdmaglev.RegisterOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	regs[4] = r
	check(addrs)

	if err := regs[1].Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	check(slices.Delete(slices.Clone(addrs), 1, 2))
}
