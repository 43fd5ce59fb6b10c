// Package ops is what the load balancer programs (cmd/l4lb and
// cmd/lbproxy) share: the admin listener and its JSON replies, the
// Prometheus exporter their /metrics serve (with the Go runtime's and the
// process's metrics, the program's build_info and its OpenTelemetry
// resource), what the binary says of its build (-version), the etcd
// client, and the membership sources their settings name, each kind of
// source in a file of its own behind one small interface, declaring its
// own settings (package setting: their flags, their keys in l4lb's
// configuration file and their rows in the docs come from there), each
// program taking the kinds it can use. A new kind of source is its file
// and its row in sources.go's registry.
//
// Package setting, beside it, is how the programs declare a setting once.
//
// It is a module of its own, internal to the programs, so that the root
// module's requirements stay the library's.
package ops
