// Lbproxy is an HTTP load balancer built on Maglev consistent hashing: an
// httputil.ReverseProxy over an httpmaglev.Transport, which sends each
// request to the backend owning its key in a Maglev table of the healthy
// backends, so that the same client (or session, or tenant) keeps reaching
// the same backend, and a membership change moves only the keys it must.
//
// Usage:
//
//	lbproxy -backend http://127.0.0.1:9001 -backend http://127.0.0.1:9002 [flags]
//	lbproxy -demo 3
//
// Backends come from -backend (repeatable, or comma-separated) and
// -backends-file (one a line, '#' starts a comment). Each is a base URL,
// or NAME=URL: the table hashes names, so a named backend keeps its keys
// when its address changes. An unnamed backend is named HOST:PORT, its
// URL's host, as httpmaglev names it: lbproxy and a Go client given the
// same URLs route every key alike. -demo N starts N toy backends on loopback.
//
// Or they come from a registry, which keeps a fleet of proxies in
// agreement with no files to copy: every proxy watching the same
// membership computes the same table.
//
//	lbproxy -etcd http://10.0.0.1:2379,http://10.0.0.2:2379 -etcd-prefix services/web
//	lbproxy -dns web.default.svc.cluster.local:8080 [-dns-interval 5s]
//	lbproxy -dns-srv _http._tcp.web.default.svc.cluster.local
//	lbproxy -k8s-service default/web:http [-kubeconfig FILE]
//
// -etcd (comma-separated client URLs) with -etcd-prefix watches the
// endpoints registered under the prefix in the format of etcd's gRPC
// naming (go.etcd.io/etcd/client/v3/naming/endpoints; see
// github.com/maglevlb/maglev/etcdmaglev, whose Register a backend uses to
// join): each endpoint is the backend named by its Addr, at http://Addr.
// While etcd is unreachable the proxy keeps the last set. -dns looks up a
// name's A and AAAA records every -dns-interval (each address is the
// backend IP:PORT), -dns-srv its SRV records (each of the lowest priority
// is the backend TARGET:PORT); a failed lookup keeps the last answer. A
// proxy uses one source: -etcd, -dns and -dns-srv exclude one another and
// -backend, -backends-file and -demo.
//
// Requests are keyed by client IP (-key ip, the default: the address the
// connection comes from), or by a header (-key header:X-Session-Id); a
// request without the header, or with an empty one, is keyed by its
// client IP.
//
// A health checker GETs each backend's -health-path every -health-interval,
// all backends at once. A new backend is in service until its first
// check, which decides (the rule of l4lb's health checks too); then
// -health-fall consecutive failures (a non-2xx answer, no answer within
// -health-timeout, or no connection) drop a backend from the table, and
// -health-rise consecutive passes put it back. The flags are named as
// l4lb's (-fall and -rise, their names before, are refused, naming these).
// A backend that dies is dropped by the -health-fall-th round after its
// death: with the default 2, within two intervals if it refuses
// connections, plus one -health-timeout if it hangs. Passive ejection drops
// it sooner under traffic: -eject-after consecutive failed requests (3 by
// default; -1 turns it off) eject it until -health-rise checks pass. Each change rebuilds the table off the request
// path, publishes it atomically and logs how many slots moved.
//
// Until its backend is dropped, a request whose backend fails before
// answering (refused, reset, timed out) is sent once more, to the key's
// backend in the table without the failed one, if it may be sent twice: its
// method is GET, HEAD, OPTIONS, PUT, DELETE or TRACE, or it has an
// Idempotency-Key (or X-Idempotency-Key) header, and its body is at most
// 1 MiB. Any other request, or a second failure, gets 502; so does a
// response cut off midway, which cannot be retried. With no healthy backend,
// every request gets 503 "no healthy backend".
//
// With -balance-factor F (0, the default, is off; F must otherwise be at
// least 1, and Envoy's users commonly set 1.25), the proxy bounds loads
// (consistent hashing with bounded loads, as Envoy's hash_balance_factor):
// a backend takes at most ceil(F × L / N) of the L requests in flight, and
// a request whose backend is full goes to the key's next choice in the
// table's candidate order (see maglev.Table.Candidates). A hot key then
// spills over instead of sinking its backend, while every other key stays
// where Maglev puts it. A retried request keeps its place in its first
// backend's count.
//
// The admin listener (-admin) serves /debug/maglev: the backends with their
// health, slot counts, requests in flight and requests spilled away from
// them, the table size, the balance factor, the totals of requests, of
// retries, of requests in flight and of spilled requests, and the last
// rebuild and its churn, as JSON: httpmaglev.State and the -key flag. It
// also serves /metrics, the Transport's OpenTelemetry metrics in
// Prometheus's text format (requests by backend and outcome, retries,
// ejections, rebuilds and slots moved, spills, slots per backend; see
// docs/metrics.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"github.com/maglevlb/maglev/cmd/internal/ops"
)

// options are the flags: the proxy's config and where to serve it.
type options struct {
	cfg    config
	listen string // proxy address
	admin  string // admin address; "" for none
	demo   int    // demo backends to start

	src *ops.Sources // -etcd, -dns, -dns-srv, -k8s-service: where the backends come from, if not static
}

// errReported is the error parseFlags returns for flags that the flag
// package has already reported, with the usage.
var errReported = errors.New("lbproxy: bad flags")

// listFlag is a flag.Value collecting repeated, comma-separated values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, splitList(v)...); return nil }

// renamed are the flags lbproxy had before v0.1.0 under other names, by
// their old names: a command line that gives one is refused, naming the
// flag it is now.
var renamed = map[string]string{"rise": "health-rise", "fall": "health-fall"}

// checkRenamed refuses the flags of args that renamed lists.
func checkRenamed(args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if now, ok := renamed[name]; ok {
			return fmt.Errorf("lbproxy: -%s is -%s, the name l4lb has too", name, now)
		}
	}
	return nil
}

func parseFlags(args []string) (options, error) {
	var o options
	var backends listFlag
	var file string
	fs := flag.NewFlagSet("lbproxy", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "proxy listen `address`")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:9090", "admin listen `address`, serving /debug/maglev and /metrics; empty for none")
	fs.Var(&backends, "backend", "backend `URL` or NAME=URL; repeatable, or comma-separated")
	fs.StringVar(&file, "backends-file", "", "`file` of backends, one a line; # starts a comment")
	fs.IntVar(&o.demo, "demo", 0, "start `N` demo backends on loopback")
	fs.StringVar(&o.cfg.Key, "key", "ip", "routing key: ip, or header:NAME (falls back to the client IP)")
	fs.StringVar(&o.cfg.HTTP.HealthPath, "health-path", "/healthz", "`path` of the backends' health check")
	fs.DurationVar(&o.cfg.HTTP.HealthInterval, "health-interval", time.Second, "time between health checks")
	fs.DurationVar(&o.cfg.HTTP.HealthTimeout, "health-timeout", 500*time.Millisecond, "health check timeout, at most the interval")
	fs.IntVar(&o.cfg.HTTP.Fall, "health-fall", 2, "consecutive failed checks that drop a backend (a new backend's first check decides)")
	fs.IntVar(&o.cfg.HTTP.Rise, "health-rise", 2, "consecutive passed checks that re-add a backend")
	fs.IntVar(&o.cfg.HTTP.EjectAfter, "eject-after", 3, "consecutive failed requests that eject a backend until -health-rise checks pass; -1 for off")
	fs.IntVar(&o.cfg.HTTP.Consecutive5xx, "consecutive-5xx", 0, "consecutive answers with a 5xx status that eject a backend, as Envoy's consecutive_5xx; 0 for off")
	fs.DurationVar(&o.cfg.HTTP.EjectionTime, "ejection-time", 10*time.Second, "the base of an ejection's backoff: the n-th ejection in a row lasts at least (n-1) times it, and until -health-rise checks pass")
	fs.DurationVar(&o.cfg.HTTP.MaxEjectionTime, "max-ejection-time", 300*time.Second, "the longest one ejection's backoff lasts; at least -ejection-time")
	fs.Int64Var(&o.cfg.HTTP.MaxRetryBody, "max-retry-body", 1<<20, "the largest request body, in `bytes`, buffered so that an idempotent request can be retried on another backend; -1 buffers none")
	fs.BoolVar(&o.cfg.HTTP.DisableRetries, "no-retries", false, "send every request once: no retry on another backend")
	fs.BoolVar(&o.cfg.HTTP.TrustForwardedFor, "trust-forwarded-for", false, "take the client IP (-key ip, and header:NAME's fallback) from X-Forwarded-For: only behind a proxy that sets it")
	fs.IntVar(&o.cfg.HTTP.TableSize, "m", maglev.DefaultSize, "Maglev table size, a prime")
	fs.Uint64Var(&o.cfg.Seed, "seed", 0, "XXH3 seed of the table; 0 for plain XXH3")
	fs.Float64Var(&o.cfg.HTTP.BalanceFactor, "balance-factor", 0,
		"bounded loads: a backend holds at most `F` times its share of the requests in flight, then a key spills to its next choice; 0 for off, else at least 1 (Envoy users set 1.25)")
	o.src = ops.RegisterSources(fs, "lbproxy", ops.AllSources)
	if err := checkRenamed(args); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, errReported
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("lbproxy: unexpected argument %q", fs.Arg(0))
	}
	o.cfg.Backends = backends
	if file != "" {
		specs, err := readBackendsFile(file)
		if err != nil {
			return o, err
		}
		o.cfg.Backends = append(o.cfg.Backends, specs...)
	}
	// Checked here too, before -demo starts anything, as a flag error.
	if _, err := bounded.New(nil, o.cfg.HTTP.BalanceFactor); err != nil {
		return o, fmt.Errorf("lbproxy: -balance-factor: %w", err)
	}
	static := ""
	if len(o.cfg.Backends) > 0 || o.demo > 0 {
		static = "-backend, -backends-file or -demo"
	}
	if err := o.src.Check(static); err != nil {
		return o, err
	}
	o.cfg.Dynamic = o.src.Dynamic()
	if len(o.cfg.Backends) == 0 && o.demo <= 0 && !o.cfg.Dynamic {
		return o, errors.New("lbproxy: no backends: use -backend, -backends-file, -demo, -etcd, -dns, -dns-srv or -k8s-service")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		if err != errReported {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o, log.New(os.Stderr, "", log.LstdFlags)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run serves the proxy and its admin endpoint until ctx is done, then
// shuts them down, letting requests in flight finish.
func run(ctx context.Context, o options, logger *log.Logger) error {
	if o.demo > 0 {
		specs, stop, err := startDemo(o.demo, o.cfg.HTTP.HealthPath, logger)
		if err != nil {
			return err
		}
		defer stop()
		o.cfg.Backends = append(o.cfg.Backends, specs...)
	}
	p, err := newProxy(o.cfg, logger)
	if err != nil {
		return err
	}
	defer p.close()
	stop, err := o.src.Watch(ctx, p.t.SetEndpoints, ops.WatchOptions{Logger: p.slog})
	if err != nil {
		return err
	}
	defer stop()
	servers := []*http.Server{{Addr: o.listen, Handler: p}}
	if o.admin != "" {
		servers = append(servers, &http.Server{Addr: o.admin, Handler: p.adminHandler()})
	}
	var listeners []net.Listener
	for _, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			for _, ln := range listeners {
				_ = ln.Close() // never served; the listen error is the one to report
			}
			return fmt.Errorf("lbproxy: %w", err)
		}
		listeners = append(listeners, ln)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		srv.ReadHeaderTimeout = 10 * time.Second
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	logger.Printf("proxy on http://%s, keyed by %s, %d backends", listeners[0].Addr(), o.cfg.Key, len(p.t.State().Backends))
	if len(listeners) > 1 {
		logger.Printf("admin on http://%s/debug/maglev", listeners[1].Addr())
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
		err = fmt.Errorf("lbproxy: %w", err)
	}
	logger.Print("shutting down: finishing requests in flight")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdown); err != nil {
			logger.Printf("shutting down %s: %v", srv.Addr, err)
		}
	}
	return err
}
