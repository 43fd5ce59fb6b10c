// Package ops is what the load balancer programs (cmd/l4lb and
// cmd/lbproxy) share: the admin listener and its JSON replies, the
// Prometheus exporter their /metrics serve, the etcd client, and the
// membership sources their flags name, each source in a file of its own
// behind one small interface.
//
// It is a module of its own, internal to the programs, so that the root
// module's requirements stay the library's.
package ops
