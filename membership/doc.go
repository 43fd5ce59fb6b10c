// Package membership is the one shape of "who the backends are" that every
// membership source of this project emits, and what every source does with
// it. A source (etcdmaglev's Watch, k8smaglev's Watch, WatchDNS and
// WatchSRV here) reads its registry and hands each new list of endpoints to
// a set function; the consumers adapt the same list to their own backends
// in one call each (httpmaglev.FromEndpoints for an HTTP Transport,
// xdpmaglev.FromEndpoints for the XDP data plane). It is a small module of
// its own, standard library only, so that an L4 load balancer that takes
// its backends from etcd builds no HTTP code:
//
//	import "github.com/maglevlb/maglev/membership"
//
// # Endpoints
//
// An Endpoint is a backend's name in a table, its address (Host, an IP
// address or a DNS name, and Port), its Weight (0: drained, as everywhere
// in the project) and the source's metadata. A list of endpoints has one
// canonical order and one rule for duplicates and equality (Canonical,
// Equal), so every source de-duplicates alike, and two lists that Equal
// reports equal build the same table in every consumer.
//
// # Watchers
//
// Watch runs a Source and delivers its lists: it returns once a first list
// has been accepted by set, or with the error that kept it from being read
// or accepted; it then calls set for each list that differs from the last
// one set accepted, retries a list set rejects after a backoff (100 ms,
// doubling up to 5 s), never calls set while the source has nothing new
// (a registry that is down leaves the last list in force), and Close stops
// it and waits for its goroutines. Every source of the project is a Source
// run by Watch, so they behave alike.
//
// # DNS
//
// WatchDNS follows a name's A and AAAA records, WatchSRV its SRV records,
// looked up at an interval through a net.Resolver: the membership of a
// Kubernetes headless Service, or of any name whose records list the
// backends.
package membership
