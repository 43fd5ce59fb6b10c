// Package k8smaglev feeds Maglev tables from Kubernetes: the backends of
// an HTTP client or proxy are the ready endpoints of one port of a
// Service, as its EndpointSlices say. A service gets it with one import:
//
//	import "github.com/maglevlb/maglev/k8smaglev"
//
// and one Watcher, which hands every new list of membership.Endpoint to a
// httpmaglev.Transport's SetEndpoints (or any function taking the list;
// xdpmaglev.FromEndpoints adapts it to an XDP service's backends):
//
//	t, _ := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-User")})
//	cfg, _ := k8smaglev.RESTConfig("") // in a pod: its service account
//	client := kubernetes.NewForConfigOrDie(cfg)
//	svc := k8smaglev.Service{Namespace: "prod", Name: "users", Port: "http"}
//	w, err := k8smaglev.Watch(ctx, client, svc, t.SetEndpoints, k8smaglev.WatchOptions{Logger: logger})
//	defer w.Close()
//
// The client needs get, list and watch on endpointslices
// (discovery.k8s.io) in the Service's namespace.
//
// # Names, drain and families
//
// An endpoint's name in the table is "IP:PORT" ("[IP]:PORT" for IPv6):
// the name membership.WatchDNS gives the same address from the Service's
// headless name, and gRPC's resolvers give it, so every Watcher, DNS-fed
// client and gRPC channel (through the resolver in k8sresolver) that knows
// the same endpoints builds the same table. A ready endpoint weighs 1. A
// terminating endpoint that still serves (a pod being deleted) weighs 0,
// which drains it: it takes no new keys, and the requests already routed
// to it finish. An endpoint neither ready nor serving is left out. An
// address in several slices of the Service is one endpoint. A dual-stack
// Service is read in one family, WatchOptions.AddressType. An endpoint's
// Meta has its "zone" and "node" when the slice gives them.
//
// # Consistency and outages
//
// A Watcher runs one client-go Reflector on the Service's slices, into a
// store of its own: watch events are applied as they come, and a relist
// (after a watch gap) replaces the store at once, so set sees its whole
// difference in one call. While the API server is unreachable the last
// list stays in force. A change that changes no endpoint causes no call.
//
// # Costs
//
// A Watcher holds one watch on the API server and the Service's slices;
// each change costs O(n log n) in the n endpoints, plus a table rebuild
// when the list changed. Lookups never touch the API server.
package k8smaglev
