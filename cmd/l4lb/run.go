package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/balancer"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/dataplane"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/handoff"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/k8slb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// cmdRun is l4lb run: the load balancer.
var cmdRun = &command{
	name:  "run",
	usage: "[-config FILE | -iface DEV -vip VIP:PORT [flags]]",
	short: "run the load balancer: one service of the flags, or the services of a file",
	long: `Run attaches the data plane to -iface and runs the load balancer until
SIGINT or SIGTERM (a restart: the pinned data plane stays, forwarding, for
the next l4lb) or POST /drain-lb (out of service: withdrawn from BGP,
drained, detached). Its flags describe one service; with -config FILE
(and no other flag but -rebuild) the services and every setting come from
the YAML file, which SIGHUP, POST /reload or l4lb reload applies again.
Each flag is a setting of docs/l4lb-reference.md's table, and a key of the file.`,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		vs := config.RunFlags(fs)
		return func(ctx context.Context, args []string, _, stderr io.Writer) error {
			if err := noArgs(args); err != nil {
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
				log.Warn("configuration warning", "warning", w)
			}
			return logged(log, runLB(ctx, g, svcs, log))
		}
	},
}

// meterScope is the instrumentation scope of l4lb's own metrics.
const meterScope = "github.com/maglevlb/maglev/cmd/l4lb"

// lbRun is a running load balancer: what runLB's steps share.
type lbRun struct {
	g   config.Global
	log *slog.Logger
	pm  *ops.Metrics
	lb  *xdpmaglev.LB
	sp  *bgp.Speaker // nil: no BGP
	b   *balancer.Balancer
	// state writes the services' handoffs to the state file after each
	// change, once started; nil without a state file.
	state *handoff.Writer
	svcs  *k8slb.Services   // the file's services and the Kubernetes Services'
	k8s   *k8slb.Controller // nil without vip-pool
	// stopK8s stops the controller and waits for it (nothing without).
	stopK8s func()
}

// runLB is the load balancer of g's settings and the services svcs, until
// SIGINT or SIGTERM (ctx), or POST /drain-lb.
func runLB(ctx context.Context, g config.Global, svcs []config.Service, log *slog.Logger) error {
	for _, s := range svcs {
		dataplane.WarnForwardingOff(g.Iface, s.Svc, s.Fwd.Forward, log)
	}
	r := &lbRun{g: g, log: log}
	var err error
	if r.pm, err = ops.NewMetrics("l4lb", ops.ReadBuild()); err != nil {
		return err
	}
	defer r.pm.Close()
	if err := r.load(ctx); err != nil {
		return err
	}
	defer dataplane.Release(r.lb) // on an error; the normal path leaves it in wait
	if r.sp != nil {
		defer r.sp.StopServer(false) // on an error, with no drain; after Restart or Retire, nothing
	}
	defer r.b.Close()
	handoff.Take(ctx, r.lb, g.Handoff.StateFile, g.Handoff.Peers, log)
	r.svcs = &k8slb.Services{Apply: r.b.Apply, Log: log}
	if r.k8s, r.stopK8s, err = k8slb.Start(ctx, g, r.svcs, log, k8slb.FirstRound); err != nil {
		return err
	}
	defer r.stopK8s()
	reload, err := r.start(ctx, svcs)
	if err != nil {
		return err
	}
	r.state.Start()
	defer r.state.Close() // on an error; the normal path closes it in wait
	if g.Handoff.Listen != "" {
		a, err := handoff.Serve(g.Handoff.Listen, r.lb, log)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close() }()
	}
	if g.Admin != "" {
		var asp admin.Speaker // nil, not a nil *bgp.Speaker, without BGP
		if r.sp != nil {
			asp = r.sp
		}
		mux := http.NewServeMux()
		admin.Register(mux, r.b, asp, reload)
		mux.Handle("GET "+handoff.Path, handoff.Handler(r.lb))
		mux.Handle("/metrics", r.pm.Handler)
		a, err := ops.ServeAdmin(g.Admin, mux)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close() }()
		log.Info("admin listening", "url", "http://"+a.Addr().String()+"/debug/maglev")
	}
	return r.wait(ctx)
}

// load loads the data plane (adopting a pinned one), starts the BGP
// speaker, and makes the balancer, with no service yet.
func (r *lbRun) load(ctx context.Context) error {
	g := r.g
	g.Opts.MeterProvider = r.pm.Provider
	g.Opts.PinPath, g.Opts.Rebuild = g.Pin.Path(g.Iface, r.log), g.Pin.Rebuild
	var bal atomic.Pointer[balancer.Balancer] // for Changed, which the data plane may call before the balancer is made
	g.Opts.Changed = func(svc xdpmaglev.Service) {
		if b := bal.Load(); b != nil {
			b.Resolved(svc)
		}
	}
	var err error
	if r.lb, err = xdpmaglev.Load(g.Iface, g.Opts); err != nil {
		return dataplane.LoadError(err, g.Iface)
	}
	var bsp balancer.Speaker // nil, not a nil *bgp.Speaker, without BGP
	if g.BGP.ASN != 0 {
		if r.sp, err = bgp.New(g.BGP, r.pm.Provider.Meter(meterScope), r.log); err != nil {
			dataplane.Release(r.lb)
			return err
		}
		bsp = r.sp
		r.log.Info("bgp: speaker started", g.BGP.LogAttrs()...)
	}
	r.state = handoff.NewWriter(g.Handoff.StateFile, r.lb, r.log)
	if r.b, err = balancer.New(ctx, r.lb, balancer.Options{Iface: g.Iface, Meter: r.pm.Provider.Meter(meterScope), Speaker: bsp, Logger: r.log, Applied: r.state.Changed}); err != nil {
		if r.sp != nil {
			r.sp.StopServer(false)
		}
		dataplane.Release(r.lb)
		return err
	}
	bal.Store(r.b)
	r.b.Adopt()
	return nil
}

// start applies the services, deletes those an earlier l4lb left that
// the configuration does not hold, sets up the reloads of a file (SIGHUP,
// and the func POST /reload calls, nil without a file), and opens the BGP
// sessions once every service has its first state.
func (r *lbRun) start(ctx context.Context, svcs []config.Service) (func() (string, error), error) {
	if r.g.File != "" {
		r.log.Info("attached", "iface", r.g.Iface, "mode", r.lb.Mode().String(), "file", r.g.File)
	}
	did, err := r.svcs.SetFile(svcs)
	if err != nil {
		return nil, err
	}
	if err := r.b.Prune(); err != nil {
		return nil, err
	}
	var reload func() (string, error)
	if r.g.File != "" {
		r.log.Info("configuration applied", "file", r.g.File, "applied", did)
		reload = r.reloader()
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer signal.Stop(hup)
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
	if r.sp != nil {
		if err := r.sp.Connect(); err != nil {
			return nil, err
		}
	}
	return reload, nil
}

// reloader returns the reload of the configuration file: read it again,
// refuse a change of the load balancer's own settings, apply it.
func (r *lbRun) reloader() func() (string, error) {
	return func() (string, error) {
		ng, nsvcs, err := config.Load(r.g.File)
		if err == nil {
			err = config.SameGlobal(r.g, ng)
		}
		var did balancer.Applied
		if err == nil {
			did, err = r.svcs.SetFile(nsvcs)
		}
		if err == nil {
			r.k8s.SetGlobal(ng) // the Services' services of the file's new defaults
		}
		r.state.Changed() // a service that stopped is no longer the file's
		if err != nil {
			r.log.Warn("reload refused, the running configuration stays", "file", r.g.File, "err", err)
			return "", err
		}
		r.log.Info("reloaded", "file", r.g.File, "applied", did)
		return did.String(), nil
	}
}

// wait runs until SIGINT or SIGTERM (ctx: a restart) or POST /drain-lb
// (out of service), reading the driver's counters meanwhile, then leaves
// the data plane to the next l4lb, or detaches it.
func (r *lbRun) wait(ctx context.Context) error {
	// The driver's counters are read until l4lb stops, and never after
	// the data plane is released or closed.
	dctx, stopDriver := context.WithCancel(ctx)
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		dataplane.WatchDriver(dctx, r.lb, r.g.Iface, dataplane.DriverEvery, r.log)
	}()
	defer func() { stopDriver(); <-driverDone }()
	retired := false
	select {
	case <-ctx.Done(): // SIGINT or SIGTERM: a restart
		if r.sp != nil {
			r.sp.Restart() // the routers keep the paths (graceful restart), or they are withdrawn and drained (no graceful restart, or BFD)
		}
	case <-r.sp.OutOfService(): // POST /drain-lb: withdrawn, drained, the sessions closed
		retired = true
	}
	stopDriver()
	<-driverDone
	r.stopK8s() // no Apply after the balancer closes
	r.b.Close()
	r.state.Close() // the last word of this l4lb, for the next
	if retired {
		return dataplane.Detach(r.lb, r.g.Iface, r.log) // out of service: the program and the pins go
	}
	return dataplane.Leave(r.lb, r.g.Iface, r.log) // the data plane stays, pinned, for the next l4lb
}

// logged logs err, if not nil, and returns it as a loggedError.
func logged(log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	log.Error("l4lb stopped", "err", err)
	return loggedError{err}
}
