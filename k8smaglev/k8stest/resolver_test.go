package k8stest_test

// The gRPC resolver against the real API server and real gRPC servers:
// grpcmaglev on "k8s:///web.NAMESPACE:grpc" sends every key to its owner
// in maglev.New over the ready endpoints' "IP:PORT", the table a
// Transport fed by k8smaglev.Watch on the same Service computes.

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/maglevlb/maglev/grpcmaglev"
	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/k8smaglev/k8sresolver"
	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

const grpcPort = 9090

// echoServer answers UnaryCall with its own address.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	addr string
}

func (s *echoServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: s.addr}, nil
}

// startGRPCServer starts a gRPC server on ip:9090 (a backend's address,
// besides its HTTP server), stopped at the end of the test.
func startGRPCServer(t *testing.T, ip string) string {
	t.Helper()
	addr := net.JoinHostPort(ip, fmt.Sprint(grpcPort))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &echoServer{addr: addr})
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return addr
}

func TestGRPCResolver(t *testing.T) {
	c := k8stest.Start(t)
	ns := c.Namespace(t)
	c.GrantEndpointSlices(t, ns)
	cs := c.Client(t)
	createService(t, cs, ns, "web")
	bs := startBackends(t, 6, 5)
	grpcAddrs := make([]string, len(bs))
	for i, b := range bs {
		grpcAddrs[i] = startGRPCServer(t, b.ip)
	}
	putSlice(t, cs, ns, "web", "web-a", grpcPort, readyEPs(bs[:4]...)...)

	cc, err := grpc.NewClient("k8s:///web."+ns+":grpc",
		grpc.WithResolvers(k8sresolver.NewBuilder(c.LBClient(t), k8sresolver.Options{})),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"maglev": {}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	client := testgrpc.NewTestServiceClient(cc)
	// A Transport fed by k8smaglev.Watch on the same port: its table
	// names the same endpoints, so it must pick every key's server too.
	p := newProxy(t, c.LBClient(t), k8smaglev.Service{Namespace: ns, Name: "web", Port: "grpc"})
	ks := keys(500)

	// check sends every key through the channel, and fails t unless it
	// reaches its owner over ready, which is also the Transport's pick.
	check := func(step string, ready []string) {
		t.Helper()
		want := owners(t, ready, ks)
		bad := 0
		for _, k := range ks {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			resp, err := client.UnaryCall(grpcmaglev.WithKey(ctx, k), &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			cancel()
			b, _ := p.tr.Lookup(k)
			if err != nil || resp.Hostname != want[k] || b.Name != want[k] {
				if bad < 3 {
					t.Errorf("%s: key %s: channel %v %v, Transport %s, want %s", step, k, resp.GetHostname(), err, b.Name, want[k])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d keys missed their owner", step, bad, len(ks))
		}
	}
	// settled waits until the channel sends the first 50 keys to their
	// owners over ready, and the Watcher has as many endpoints.
	settled := func(step string, ready []string) {
		t.Helper()
		want := owners(t, ready, ks[:50])
		waitFor(t, 10*time.Second, step, func() bool {
			active := 0
			for _, e := range p.w.Endpoints() {
				if e.Weight > 0 {
					active++
				}
			}
			if active != len(ready) {
				return false
			}
			for _, k := range ks[:50] {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				resp, err := client.UnaryCall(grpcmaglev.WithKey(ctx, k), &testgrpc.SimpleRequest{})
				cancel()
				if err != nil || resp.Hostname != want[k] {
					return false
				}
			}
			return true
		})
	}

	check("4 ready endpoints", grpcAddrs[:4])

	// A fifth becomes ready, then the second turns terminating (still
	// serving): gRPC leaves it out, as it has no weight that drains.
	putSlice(t, cs, ns, "web", "web-a", grpcPort, readyEPs(bs...)...)
	settled("the fifth endpoint in the channel", grpcAddrs)
	check("5 ready endpoints", grpcAddrs)

	putSlice(t, cs, ns, "web", "web-a", grpcPort, ep{bs[0].ip, ready}, ep{bs[1].ip, draining}, ep{bs[2].ip, ready}, ep{bs[3].ip, ready}, ep{bs[4].ip, ready})
	rest := []string{grpcAddrs[0], grpcAddrs[2], grpcAddrs[3], grpcAddrs[4]}
	settled("the terminating endpoint out of the channel", rest)
	check("1 terminating endpoint left out", rest)
}
