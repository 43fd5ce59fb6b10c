// Package httpmaglev is Maglev consistent hashing for Go HTTP clients and
// reverse proxies, on the standard library, the root package and
// OpenTelemetry's metric API. A service gets it with
// one import:
//
//	import "github.com/maglevlb/maglev/httpmaglev"
//
// and one http.RoundTripper, a [Transport], which sends each request to the
// backend that owns the request's key in the Maglev table of
// github.com/maglevlb/maglev over the configured backends, with those that
// failed taken out of it:
//
//	t, err := httpmaglev.NewTransport(httpmaglev.Config{
//		Backends: backends,                         // []httpmaglev.Backend{{Name, URL, Weight}}
//		Key:      httpmaglev.HeaderKey("X-User"),   // nil: the client IP
//	})
//	client := &http.Client{Transport: t}           // client-side sharding
//	proxy := &httputil.ReverseProxy{Transport: t,  // or a reverse proxy
//		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "backends"}) },
//		ErrorHandler: httpmaglev.ErrorHandler}     // 503 when no backend is healthy
//
// # Routing
//
// The table is maglev.NewWeighted over the configured, undrained backends'
// names and weights (a backend given no weight weighs 1, and one of weight
// 0 is drained, as in every package of the project; with no weights the
// table is maglev.New's), with
// Config's TableSize and Hasher, or whatever Config.NewTable builds. With
// every backend healthy and bounded loads off, a request whose key is k
// goes to that table's Lookup(k): the owner every process that knows the same
// backends computes, with no coordination. A request whose Key is empty
// is keyed by its client IP, never rejected; one with neither (an
// http.Client's own requests have no client IP) goes to a random slot's
// owner, so keyless requests spread in proportion to the backends' slots.
//
// # Membership and health
//
// [Transport.SetBackends] replaces the membership, which builds the table.
// Active health checks (Config.HealthPath, every HealthInterval, Fall and
// Rise) and passive ejection (EjectAfter consecutive backend faults, or
// Consecutive5xx answers with a 5xx status, backing off as Envoy's outlier
// detection does) take backends out of service and put them back. The
// active checks follow the rule of every health check of this repository
// (cmd/l4lb's too): a new backend is in service until its first probe,
// which decides (passed, it is up; failed, it is out at once); after
// that, Fall failed probes in a row take it out and Rise passed ones put
// it back. A failure is not a membership change: the backend stays configured, and
// the Transport routes by the table without it (maglev.Table.Without), in
// which only its keys moved; once readmitted it takes back exactly those.
// Only the backend's faults count: a failed dial or TLS handshake, the
// connection lost before the response headers, a timeout awaiting them;
// never the caller's own (a failing request body, a wrong ContentLength,
// a cancelled context). A backend's [Status] and the [Reason] it is out
// are in [Transport.State]. Every change publishes a new immutable
// snapshot, made off the request path, with an atomic pointer; requests
// never wait for a rebuild.
//
// # Retries
//
// An idempotent request whose backend fails before answering is sent once
// more, to the owner of its slot in the table without the failed backend
// (Without on the table it was routed by): where its key lives once that
// backend is ejected. The first retry away from a backend in a snapshot
// computes that table once and keeps the owners of the backend's slots;
// later ones cost a hash and a binary search. Requests that are not
// idempotent are never sent twice. See [Transport.RoundTrip].
//
// # Bounded loads
//
// With Config.BalanceFactor F, a request goes to the first of its key's
// candidates holding fewer than ceil(F × L × w/Σw) of the L requests in
// flight (bounded.Picker, one per Transport, its table kept in each
// snapshot with Picker.With), and holds its place until its response
// body is closed, it fails, or its context ends.
//
// # Costs
//
// The pick (key to backend, bounded loads off) is one hash and one array
// index, takes no lock and does not allocate; RoundTrip adds a shallow
// copy of the request (two allocations) and, with bounded loads, a few
// atomic operations and a body wrapper. A membership change over N
// backends builds one table, off the request path; a failure or a
// readmission builds none, only the table without the backends out of
// service (maglev.Table.Without, a fraction of a build). Through httputil.ReverseProxy on
// loopback the Transport costs about as much as a plain single-backend
// transport; see docs/http.md for the measured figures.
//
// # Concurrency
//
// A Transport is safe for concurrent use by multiple goroutines;
// SetBackends, State and Close may be called at any time, from any
// goroutine. NewTransport starts one goroutine, for health checks and
// rebuilds, which Close stops.
package httpmaglev
