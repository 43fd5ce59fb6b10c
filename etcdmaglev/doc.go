// Package etcdmaglev feeds Maglev tables from etcd: the backends of an
// HTTP client or proxy, of an XDP load balancer, and the servers of a gRPC
// channel, are the endpoints registered under a key prefix, in the format
// of etcd's own gRPC naming (go.etcd.io/etcd/client/v3/naming/endpoints).
// A service gets it with one import:
//
//	import "github.com/maglevlb/maglev/etcdmaglev"
//
// and one Watcher, which hands every new list of membership.Endpoint to a
// httpmaglev.Transport's SetEndpoints (or any function taking the list;
// xdpmaglev.FromEndpoints adapts it to an XDP service's backends):
//
//	t, _ := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-User")})
//	w, err := etcdmaglev.Watch(ctx, client, "services/web", t.SetEndpoints, etcdmaglev.WatchOptions{Logger: logger})
//	defer w.Close()
//
// The package imports no HTTP code: a program that takes its backends
// from etcd and routes packets builds no httpmaglev.
//
// A backend registers itself with Register, under a lease it keeps alive,
// and leaves with Deregister:
//
//	reg, err := etcdmaglev.Register(ctx, client, "services/web",
//		endpoints.Endpoint{Addr: "10.0.0.7:8080"}, etcdmaglev.RegisterOptions{TTL: 5 * time.Second, Logger: logger})
//	...
//	reg.Deregister(ctx) // proxies stop sending new keys here
//	time.Sleep(drain)   // requests already on their way still arrive
//	srv.Shutdown(ctx)
//
// # Names, URLs and weights
//
// An endpoint's name in the table is its Addr, verbatim: the name
// grpcmaglev gives the endpoint etcd's gRPC resolver makes of the same
// key, so HTTP and gRPC clients of one registry, and every proxy of a
// fleet, compute the same table with no coordination. An Addr without a
// scheme (HOST:PORT) is reached by a Transport at http://Addr; one with
// http:// or https:// at that URL (the scheme is the endpoint's
// Meta["scheme"]). See Endpoint.
//
// An endpoint weighs 1 unless its Metadata object has a "weight" field
// (an integer from 0 to 2^32-1; 0 drains it), so a registry that gives no
// weight builds maglev.New's table. Several keys naming one Addr are one
// endpoint, of the greatest weight among them. etcd's gRPC resolver
// drops Metadata, so grpcmaglev gives every endpoint the weight 1: a
// registry shared by HTTP and gRPC clients that must agree leaves weights
// out.
//
// # Consistency and outages
//
// A Watcher reads the prefix at one revision and watches from the next,
// so no change is missed or applied twice; after a failure it resumes
// from the revision it reached, and when that revision has been compacted
// it lists the prefix again. While etcd is down the last list stays in
// force: the backends never drop to zero because the registry is down
// (active health checks and passive ejection in httpmaglev still take
// dead backends out). A value that is not an endpoint is left out and
// logged with its key. A change that changes no endpoint causes no call,
// and so no rebuild.
//
// # gRPC
//
// gRPC clients need no code from this package: etcd's resolver
// (go.etcd.io/etcd/client/v3/naming/resolver) feeds the channel, and
// grpcmaglev balances it:
//
//	r, _ := resolver.NewBuilder(client)
//	conn, err := grpc.NewClient("etcd:///services/web",
//		grpc.WithResolvers(r),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"maglev": {"requestHashHeader": "x-user"}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// The package's tests run this against real gRPC servers registered in a
// real etcd, and check that every key reaches the owner the library
// computes over the registered Addrs.
//
// # Costs
//
// A Watcher holds one etcd watch and the parsed endpoints; each change
// costs O(n log n) in the number of keys, plus a table rebuild when the
// backends changed. A Registration holds one lease and renews it every
// TTL/3. Lookups never touch etcd.
package etcdmaglev
