// Command l4lb is a layer-4 load balancer: xdpmaglev's XDP program
// attached to one interface, sending one service's packets to its
// backends by layer-2 direct server return, or encapsulated in IPIP or GUE.
//
//	l4lb -iface eth0 -vip 203.0.113.1:80 -backend 10.0.0.11 -backend 10.0.0.12=02:00:00:00:00:12
//	l4lb -iface eth0 -vip 203.0.113.1:80 -etcd http://10.0.0.1:2379 -etcd-prefix services/web -seed 7
//	l4lb -iface eth0 -vip 203.0.113.1:80 -k8s-service prod/web:http [-kubeconfig FILE] -seed 7
//	l4lb -iface eth0 -vip 203.0.113.1:80 -forward ipip [-encap-src 10.0.1.5] -backend 10.0.2.11
//	l4lb -decap -iface eth0 -vip 203.0.113.1[,2001:db8::1]
//	l4lb -config /etc/l4lb.yaml
//	l4lb -detach -iface eth0
//	l4lb -version
//
// The flags describe one service; -config FILE describes many, in a YAML
// file whose keys are the flags' names (example.yaml, docs/l4lb.md):
// SIGHUP or POST /reload on the admin address applies a changed file
// service by service, leaving the unchanged ones untouched, and refuses a
// bad file whole, naming the line, the service and the setting.
//
// Each backend holds the VIP on its loopback device (see docs/xdp.md).
// With -forward l2 (the default) it must be on the interface's segment,
// and its MAC comes from the neighbour table when not given. With
// -forward ipip or gue (-gue-port, 6080 by default) it may be anywhere the
// kernel routes to, the outer source being -encap-src or the interface's
// address of the VIP's family; the kernel must forward on the interface
// (sysctl net.ipv4.conf.all.forwarding=1), and l4lb warns at start if it
// does not. l4lb -decap is the backends' side: the decapsulator on
// -iface for the -vip addresses, until SIGINT or SIGTERM. -flood-rate sets
// the connection tracking's flood guard (xdpmaglev.Options.FloodRate).
//
// With -etcd and -etcd-prefix, the backends are the endpoints registered
// under the prefix in the format of etcd's gRPC naming ({"Addr":"IP:PORT"},
// as etcdmaglev.Register writes it; the port is not used), each with the
// "weight" of its Metadata; the table is rebuilt and swapped atomically on
// every change, and while etcd is unreachable the last set stays.
//
// With -k8s-service NAMESPACE/NAME:PORT, the backends are the IPs of the
// Service's ready endpoints on that port, from its EndpointSlices (as
// k8smaglev.Watch reads them; the port, the Service's
// targetPort, picks the endpoints and is not used otherwise); a
// terminating but serving endpoint is drained as weight 0 in etcd is. The
// client configuration is the pod's service account inside a pod, else
// -kubeconfig, $KUBECONFIG or ~/.kube/config, as kubectl finds it.
//
// With -dns NAME:PORT, the backends are the addresses of NAME's A/AAAA
// records, looked up every -dns-interval. The sources are lbproxy's, from
// one package (cmd/internal/ops), but for -dns-srv (SRV targets are
// names, and the data plane needs addresses); one may be named, and not
// with -backend.
//
// A backend is drained by weight 0 in its etcd Metadata, by -drain IP, or
// by POST /drain?addr=IP on the admin address (POST /undrain takes it
// back; an address that is no backend, not a member nor draining, is
// 404): it gets no new flow, while the flows connection tracking holds
// for it keep going to it, for -drain-timeout; then it leaves the service.
// A backend that leaves etcd (deregistered, or its lease ran out) drains
// the same way. Load balancers of one fleet share -seed and the backend
// set, and so compute one table: each logs its digest
// (maglev.Table.Digest) on every change, and serves it with the backends'
// states at /debug/maglev/backends.
//
// With -health tcp or http, l4lb checks each member itself: a TCP connect,
// or an HTTP GET of -health-path that must answer -health-status, to the
// backend's address and the service's port (or -health-port), every
// -health-interval within -health-timeout. A backend goes down after
// -health-fall failed probes in a row and comes up after -health-rise
// passes; down, it is out of the table as maglev.Table.Without computes
// (only its slots move, and every load balancer that sees the same
// failures has the same table), and up again it takes back exactly its
// slots. If every backend is down, the service keeps its last table (it
// fails open) and says so. The members decide who may be a backend, the
// health check who is up.
//
// With -bgp-asn, -bgp-router-id and -bgp-peer ADDR,ASN (repeatable),
// l4lb speaks BGP itself (GoBGP, embedded) to those routers, accepting
// their sessions on -bgp-listen-port too, and announces the VIP as a /32
// or /128, next hop its own address on each session, while the service
// has a backend in service (of weight > 0, not drained, and up by the
// health check); it withdraws it when there is none, failing open
// included, so that the routers send the traffic to the load balancers
// that see a healthy backend. The sessions negotiate BGP graceful restart
// (RFC 4724) with -bgp-restart-time (120 s; 0: none): SIGINT and SIGTERM
// are a restart, which ends the sessions with no NOTIFICATION so that the
// routers keep l4lb's paths, as stale, for that time, until the next l4lb
// announces them again and sends its End-of-RIB. POST /drain-lb on the
// admin address takes the load balancer out of service: it withdraws the
// VIP, forwards for -bgp-drain while the routers move away, closes the
// sessions, detaches and exits; so does SIGTERM with -bgp-restart-time 0,
// or when no router's session negotiated graceful restart. -bgp-hold (9 s)
// is how long a router waits for a load balancer that went silent.
//
// l4lb logs to standard error, each line a log/slog record with its time
// and level (-log-format text, the default, or json): the attach mode,
// each table's digest, every change, warnings and errors; standard output
// is for -version (l4lb's version, VCS revision and Go version) and
// -detach. It serves
// the table's summary and the counters as JSON at /debug/maglev on the
// admin address, and /metrics for Prometheus. Its data plane
// is pinned in -pin-dir (/sys/fs/bpf/l4lb by default, a directory per
// interface: /sys/fs/bpf/l4lb/eth0), so that it outlives the process: at
// SIGINT or SIGTERM l4lb leaves the program attached and forwarding by
// the last tables, and the next l4lb on the interface adopts the maps
// (connection tracking, tables, backends, counters) and replaces the
// program on its link in one step, so that a restart drops nothing.
// Pins l4lb cannot adopt (another layout after an upgrade, another -mode)
// are refused, or replaced with -rebuild. With -pin-dir "", or where no
// BPF filesystem is mounted at the default, nothing is pinned and SIGINT
// or SIGTERM detaches. l4lb -detach -iface DEV removes the program and
// the pins, and prints what it removed. docs/l4lb.md runs a fleet of them
// behind an ECMP router, and has "Restarts and upgrades".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/balancer"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		if !errors.As(err, new(loggedError)) { // an error before the log format was known
			newLogger("text", os.Stderr).Error(err.Error())
		}
		os.Exit(1)
	}
}

// run is l4lb with the command line args: version and detach print on
// stdout; everything else logs on stderr, once the log format is known
// (from the flags, or from the -config file). An error run has logged is
// a loggedError; one before the log format was known is not.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("l4lb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cmd, rest, err := config.Legacy(args, fs)
	if err != nil {
		return err
	}
	cfs := flag.NewFlagSet("l4lb "+cmd, flag.ContinueOnError)
	cfs.SetOutput(stderr)
	switch cmd {
	case "version":
		_, err := fmt.Fprintln(stdout, ops.ReadBuild().Line("l4lb"))
		return err
	case "detach":
		vs := config.DetachFlags(cfs)
		if err := cfs.Parse(rest); err != nil {
			return err
		}
		d, err := config.BuildDetach(vs, "-detach")
		if err != nil {
			return err
		}
		return runDetach(d, stdout)
	case "decap":
		vs := config.DecapFlags(cfs)
		if err := cfs.Parse(rest); err != nil {
			return err
		}
		d, err := config.BuildDecap(vs, "-decap")
		if err != nil {
			return err
		}
		log := newLogger(d.LogFormat, stderr)
		return logged(log, runDecap(ctx, d, log))
	}
	vs := config.RunFlags(cfs)
	if err := cfs.Parse(rest); err != nil {
		return err
	}
	r, err := config.BuildRun(vs)
	if err != nil {
		return err
	}
	g, svcs := r.Global, []config.Service{r.Service}
	if g.File != "" {
		if g, svcs, err = config.Load(g.File); err != nil {
			return err
		}
		g.Pin.Rebuild = r.Pin.Rebuild // beside -config, not in the file: a one-off
	}
	log := newLogger(g.LogFormat, stderr)
	for _, w := range g.Warnings {
		log.Warn(w)
	}
	return logged(log, runLB(ctx, g, svcs, log))
}

// logged logs err, if not nil, and returns it as a loggedError.
func logged(log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	log.Error(err.Error())
	return loggedError{err}
}

// runLB is the load balancer of g's settings and the services svcs, until
// SIGINT or SIGTERM (ctx), or POST /drain-lb.
func runLB(ctx context.Context, g config.Global, svcs []config.Service, log *slog.Logger) error {
	for _, s := range svcs {
		if w := forwardingOff(g.Iface, s.Svc, s.Fwd.Forward); w != "" {
			log.Warn(w)
		}
	}
	pm, err := ops.NewMetrics("l4lb", ops.ReadBuild())
	if err != nil {
		return err
	}
	defer pm.Close()
	g.Opts.MeterProvider = pm.Provider
	g.Opts.PinPath, g.Opts.Rebuild = g.Pin.Path(g.Iface, log), g.Pin.Rebuild
	var bal atomic.Pointer[balancer.Balancer] // for Changed, which the data plane may call before the balancer is made
	g.Opts.Changed = func(svc xdpmaglev.Service) {
		if b := bal.Load(); b != nil {
			b.Resolved(svc)
		}
	}
	lb, err := xdpmaglev.Load(g.Iface, g.Opts)
	if err != nil {
		return loadError(err, g.Iface)
	}
	defer release(lb) // on an error; the normal path leaves it below
	var sp *bgp.Speaker
	if g.BGP.ASN != 0 {
		if sp, err = bgp.New(g.BGP, pm.Provider.Meter(meterScope), log); err != nil {
			return err
		}
		defer sp.StopServer(false) // on an error, with no drain; after sp.Restart or sp.Retire, nothing
		log.Info(fmt.Sprintf("bgp: %v", g.BGP))
	}
	var bsp balancer.Speaker // nil, not a nil *bgp.Speaker, without BGP
	var asp admin.Speaker
	if sp != nil {
		bsp, asp = sp, sp
	}
	b, err := balancer.New(ctx, lb, balancer.Options{Iface: g.Iface, Meter: pm.Provider.Meter(meterScope), Speaker: bsp, Logger: log})
	if err != nil {
		return err
	}
	bal.Store(b)
	b.Adopt()
	defer b.Close()
	if g.File != "" {
		log.Info(fmt.Sprintf("attached to %s (%v), services from %s", g.Iface, lb.Mode(), g.File))
	}
	did, err := b.Apply(svcs)
	if err != nil {
		return err
	}
	if err := b.Prune(); err != nil {
		return err
	}
	var reload func() (string, error)
	if g.File != "" {
		log.Info(did)
		reload = func() (string, error) {
			ng, nsvcs, err := config.Load(g.File)
			if err == nil {
				err = config.SameGlobal(g, ng)
			}
			if err == nil {
				did, err = b.Apply(nsvcs)
			}
			if err != nil {
				log.Warn(fmt.Sprintf("reload refused, the running configuration stays: %v", err))
				return "", err
			}
			log.Info(fmt.Sprintf("reloaded %s: %s", g.File, did))
			return did, nil
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					_, _ = reload() // its record says how it went
				}
			}
		}()
	}

	if sp != nil {
		if err := sp.Connect(); err != nil { // once every service has its first state
			return err
		}
	}

	if g.Admin != "" {
		mux := http.NewServeMux()
		admin.Register(mux, b, asp, reload)
		mux.Handle("/metrics", pm.Handler)
		a, err := ops.ServeAdmin(g.Admin, mux)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close() }()
		log.Info(fmt.Sprintf("admin on http://%s/debug/maglev", a.Addr()))
	}
	// The driver's counters are read until l4lb stops, and never after
	// the data plane is released or closed.
	dctx, stopDriver := context.WithCancel(ctx)
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		watchDriver(dctx, lb, g.Iface, driverEvery, log)
	}()
	defer func() { stopDriver(); <-driverDone }()
	retired := false
	select {
	case <-ctx.Done(): // SIGINT or SIGTERM: a restart
		if sp != nil {
			sp.Restart() // the routers keep the paths (graceful restart), or they are withdrawn and drained
		}
	case <-sp.OutOfService(): // POST /drain-lb: withdrawn, drained, the sessions closed
		retired = true
	}
	stopDriver()
	<-driverDone
	b.Close()
	if retired {
		return detach(lb, g.Iface, log) // out of service: the program and the pins go
	}
	return leave(lb, g.Iface, log) // the data plane stays, pinned, for the next l4lb
}

// forwardingOff returns a warning if the encapsulating mode f cannot route
// svc's packets out of iface because the kernel does not forward there
// (bpf_fib_lookup then refuses, and the packets are dropped as
// forwarding_off), or "".
func forwardingOff(iface string, svc xdpmaglev.Service, f xdpmaglev.Forward) string {
	if f == xdpmaglev.ForwardL2 {
		return ""
	}
	// IPv4 asks the receiving interface's setting, IPv6 the global one.
	key := "net/ipv4/conf/" + iface + "/forwarding"
	all := "net.ipv4.conf.all.forwarding"
	if !svc.VIP.Addr().Unmap().Is4() {
		key, all = "net/ipv6/conf/all/forwarding", "net.ipv6.conf.all.forwarding"
	}
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		return "" // unknown, or on
	}
	return fmt.Sprintf("-forward %v: %s is 0: the kernel's route lookup refuses, and %v's packets are dropped (forwarding_off); sysctl -w %s=1",
		f, strings.ReplaceAll(key, "/", "."), svc, all)
}

// meterScope is the instrumentation scope of l4lb's own metrics.
const meterScope = "github.com/maglevlb/maglev/cmd/l4lb"
