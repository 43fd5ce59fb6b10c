package grpcmaglev_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/grpcmaglev"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Three servers on loopback, and a client that sends each user's RPCs to
// the server the Maglev table names for the user. A real client would dial
// its usual target ("dns:///users.internal:443", an xDS target, ...); this
// one lists the servers with a manual resolver.
func Example() {
	var addrs []string
	var endpoints []resolver.Endpoint
	for range 3 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		srv := grpc.NewServer()
		// testService answers UnaryCall with its own address as Hostname.
		testgrpc.RegisterTestServiceServer(srv, &testService{name: lis.Addr().String()})
		go func() {
			if err := srv.Serve(lis); err != nil {
				log.Print(err)
			}
		}()
		defer srv.Stop()
		addrs = append(addrs, lis.Addr().String())
		endpoints = append(endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: lis.Addr().String()}}})
	}
	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Endpoints: endpoints})

	// The import of grpcmaglev registers the policy; the service config
	// chooses it and names the header that carries the key.
	cc, err := grpc.NewClient(r.Scheme()+":///users",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"maglev": {"requestHashHeader": "x-user"}}]}`),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := cc.Close(); err != nil {
			log.Print(err)
		}
	}()
	client := testgrpc.NewTestServiceClient(cc)

	// Every client of the fleet computes this same table.
	table, err := maglev.New(addrs, maglev.DefaultSize, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, user := range []string{"alice", "bob", "carol"} {
		// The key in the header ...
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", user)
		byHeader, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			log.Fatal(err)
		}
		// ... or set with WithKey, which wins over the header.
		byKey, err := client.UnaryCall(grpcmaglev.WithKey(context.Background(), user), &testgrpc.SimpleRequest{})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(user, byHeader.GetHostname() == table.Lookup(user), byKey.GetHostname() == table.Lookup(user))
	}
	// Output:
	// alice true true
	// bob true true
	// carol true true
}
