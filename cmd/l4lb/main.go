// Command l4lb is a layer-4 load balancer: xdpmaglev's XDP program
// attached to one interface, sending each service's packets to its
// backends by layer-2 direct server return, or encapsulated in IPIP or
// GUE. It is a program of commands:
//
//	l4lb run -iface eth0 -vip 203.0.113.1:80 -backend 10.0.0.11 -backend 10.0.0.12=02:00:00:00:00:12
//	l4lb run -iface eth0 -vip 203.0.113.1:80 -etcd http://10.0.0.1:2379 -etcd-prefix services/web -seed 7
//	l4lb run -iface eth0 -vip 203.0.113.1:80 -k8s-service prod/web:http [-kubeconfig FILE] -seed 7
//	l4lb run -iface eth0 -vip 203.0.113.1:80 -forward ipip [-encap-src 10.0.1.5] -backend 10.0.2.11
//	l4lb run -config /etc/l4lb.yaml
//	l4lb decap -iface eth0 -vip 203.0.113.1[,2001:db8::1] -decap-sources 10.0.1.5/32
//	l4lb detach -iface eth0
//	l4lb check /etc/l4lb.yaml
//	l4lb status [-admin ADDR] [-json]
//	l4lb drain ADDR [-service NAME] [-undo]
//	l4lb reload
//	l4lb version
//	l4lb help [command]
//
// Each command is one value of command.go's kind (its usage line, short
// and long help, flags and run, as cmd/go's commands are); main only
// dispatches. The command comes first: a command line whose first
// argument is a flag is refused with the command line meant (l4lb
// -config FILE: l4lb run -config FILE).
//
// The settings are internal/config's, each declared once: the flags of
// run describe one service; -config FILE describes many, in a YAML file
// whose keys are the settings' names (example.yaml, docs/l4lb-reference.md has the
// table of every setting): SIGHUP, POST /reload on the admin address or
// l4lb reload applies a changed file service by service, leaving the
// unchanged ones untouched, and refuses a bad file whole, naming the
// line, the service and the setting; l4lb check validates a file offline
// the same way.
//
// Each backend holds the VIP on its loopback device (see docs/xdp.md).
// With -forward l2 (the default) it must be on the interface's segment,
// and its MAC comes from the neighbour table when not given. With
// -forward ipip or gue (-gue-port, 6080 by default) it may be anywhere the
// kernel routes to, the outer source being -encap-src or the interface's
// address of the VIP's family; the kernel must forward on the interface
// (sysctl net.ipv4.conf.all.forwarding=1), and l4lb warns at start if it
// does not. l4lb decap is the backends' side: the decapsulator on -iface
// for the -vip addresses, from the -decap-sources only, until SIGINT or
// SIGTERM. -flood-rate sets the connection tracking's flood guard
// (xdpmaglev.Options.FloodRate).
//
// With -etcd and -etcd-prefix, the backends are the endpoints registered
// under the prefix in the format of etcd's gRPC naming ({"Addr":"IP:PORT"},
// as etcdmaglev.Register writes it; the port is not used), each with the
// "weight" of its Metadata; the table is rebuilt and swapped atomically on
// every change, and while etcd is unreachable the last set stays. With
// -k8s-service NAMESPACE/NAME:PORT, the backends are the IPs of the
// Service's ready endpoints on that port, from its EndpointSlices (as
// k8smaglev.Watch reads them); a terminating but serving endpoint is
// drained as weight 0 in etcd is. With -dns NAME:PORT, the backends are
// the addresses of NAME's A/AAAA records, looked up every -dns-interval.
// The sources are lbproxy's, from one package (cmd/internal/ops), but for
// -dns-srv (SRV targets are names, and the data plane needs addresses);
// one may be named, and not with -backend.
//
// A backend is drained by weight 0 in its etcd Metadata, by -drain IP, by
// POST /drain?addr=IP on the admin address or by l4lb drain IP (POST
// /undrain or l4lb drain -undo takes it back; an address that is no
// backend, not a member nor draining, is 404): it gets no new flow, while
// the flows connection tracking holds for it keep going to it, for
// -drain-timeout; then it leaves the service. A backend that leaves etcd
// (deregistered, or its lease ran out) drains the same way. Load
// balancers of one fleet share -seed and the backend set, and so compute
// one table: each logs its digest (maglev.Table.Digest) on every change,
// and serves it with the backends' states at /debug/maglev/backends;
// l4lb status prints them as a table.
//
// With -health tcp or http, l4lb checks each member itself: a TCP connect,
// or an HTTP GET of -health-path that must answer -health-status, to the
// backend's address and the service's port (or -health-port), every
// -health-interval within -health-timeout. A new backend is in service
// until its first probe, which decides (internal/health's rule, lbproxy's
// too); then a backend goes down after -health-fall failed probes in a row
// and comes up after -health-rise passes; down, it is out of the table as
// maglev.Table.Without computes (only its slots move, and every load
// balancer that sees the same failures has the same table), and up again
// it takes back exactly its slots. If every backend is down, the service
// keeps its last table (it fails open) and says so. The members decide who
// may be a backend, the health check who is up.
//
// With -bgp-asn, -bgp-router-id and -bgp-peer ADDR,ASN (repeatable),
// l4lb speaks BGP itself (GoBGP, embedded) to those routers, accepting
// their sessions on -bgp-listen-port too, and announces the VIP as a /32
// or /128, next hop its own address on each session, while the service
// has a backend in service; it withdraws it when there is none, failing
// open included. The sessions negotiate BGP graceful restart (RFC 4724)
// with -bgp-restart-time (120 s; 0: none): SIGINT and SIGTERM are a
// restart, which ends the sessions with no NOTIFICATION so that the
// routers keep l4lb's paths, as stale, until the next l4lb announces them
// again and sends its End-of-RIB. POST /drain-lb on the admin address
// takes the load balancer out of service: it withdraws the VIP, forwards
// for -bgp-drain while the routers move away, closes the sessions,
// detaches and exits; so does SIGTERM with -bgp-restart-time 0, or when
// no router's session negotiated graceful restart, or with -bgp-bfd: BFD
// with each router (-bgp-bfd-interval, -bgp-bfd-multiplier) has a router
// that runs it on the session drop a dead l4lb's paths in a fraction of a
// second rather than the hold time, and l4lb's end too, graceful restart
// or not.
//
// l4lb logs to standard error, each line a log/slog record with its time
// and level (-log-format text, the default, or json); standard output is
// for what a command prints (version, detach, check, status, drain,
// reload), and their errors are plain lines on standard error. It serves
// the table's summary and the counters as JSON at /debug/maglev on the
// admin address, and /metrics for Prometheus. Its data plane is pinned in
// -pin-dir (/sys/fs/bpf/l4lb by default, a directory per interface), so
// that it outlives the process: at SIGINT or SIGTERM l4lb leaves the
// program attached and forwarding by the last tables, and the next l4lb on
// the interface adopts the maps and replaces the program on its link in
// one step, so that a restart drops nothing. Pins l4lb cannot adopt are
// refused, or replaced with -rebuild. With -pin-dir "", or where no BPF
// filesystem is mounted at the default, nothing is pinned and SIGINT or
// SIGTERM detaches. l4lb detach -iface DEV removes the program and the
// pins, and prints what it removed. docs/l4lb-howto-deploy.md runs a
// fleet of them behind an ECMP router, and docs/l4lb-howto-restart.md has
// "Restarts and upgrades".
//
// The parts are packages under internal/: config (the settings and the
// file), checker (the health checks), pool (a service's backends and what
// its data plane holds), bgp (the speaker), balancer (the running
// services), admin (the admin API, both sides); package main wires them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var plain plainError
	switch {
	case err == nil:
		return
	case errors.Is(err, flag.ErrHelp), errors.Is(err, errUsage):
		os.Exit(2)
	case errors.As(err, &plain):
		msg := err.Error()
		if !strings.HasPrefix(msg, "l4lb: ") {
			msg = "l4lb: " + msg
		}
		_, _ = fmt.Fprintln(os.Stderr, msg)
	case !errors.As(err, new(loggedError)): // an error before the log format was known
		newLogger("text", os.Stderr).Error("l4lb stopped", "err", err)
	}
	os.Exit(1)
}
