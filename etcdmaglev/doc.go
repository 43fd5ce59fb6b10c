// Package etcdmaglev feeds Maglev tables from etcd: the backends of an
// HTTP client or proxy, and the servers of a gRPC channel, are the
// endpoints registered under a key prefix, in the format of etcd's own
// gRPC naming (go.etcd.io/etcd/client/v3/naming/endpoints). A service
// gets it with one import:
//
//	import "github.com/maglevlb/maglev/etcdmaglev"
//
// and one Watcher, which hands every new backend list to a
// httpmaglev.Transport (or any function taking the list):
//
//	t, _ := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-User")})
//	w, err := etcdmaglev.Watch(ctx, client, "services/web", t.SetBackends, etcdmaglev.WatchOptions{Logger: logger})
//	defer w.Close()
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
// scheme (HOST:PORT) is reached at http://Addr; one with http:// or
// https:// at that URL. See Backend.
//
// Endpoints have equal weights unless one of them has a Metadata object
// with a "weight" field (an integer from 1 to 2^32-1); then the table is
// weighted, and an endpoint without one weighs 1. etcd's gRPC resolver
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
// logged with its key. A change that changes no backend causes no call,
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
