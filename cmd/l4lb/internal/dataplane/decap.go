package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// meterScope is the instrumentation scope of l4lb's own metrics.
const meterScope = "github.com/maglevlb/maglev/cmd/l4lb"

// decapDriverEvery is how often l4lb decap reads the driver's counters:
// DriverEvery, and less in tests.
var decapDriverEvery = DriverEvery

// RunDecap is l4lb decap: the decapsulator of -forward ipip and gue
// attached to c.Iface for the VIPs, until ctx ends, watching the driver's
// XDP counters as l4lb run does (WatchDriver), and with an admin address
// serving /debug/maglev and /metrics (maglev.xdp.driver among them);
// then it logs the counters and detaches.
func RunDecap(ctx context.Context, c config.Decap, log *slog.Logger) error {
	warnDecap(c, log)
	d, err := xdpmaglev.AttachDecap(c.Iface, c.Opts)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }() // on an error; the normal path closes it below
	vips := make([]string, len(c.Opts.VIPs))
	for i, a := range c.Opts.VIPs {
		vips[i] = a.String()
	}
	log.Info("decapsulating IPIP and GUE", "gue_port", c.Opts.GUEPort, "vips", vips, "iface", c.Iface, "mode", d.Mode().String(),
		"sources", sourcesString(c.Opts.Sources))
	if c.Admin != "" {
		pm, err := ops.NewMetrics("l4lb", ops.ReadBuild())
		if err != nil {
			return err
		}
		defer pm.Close()
		if err := observeDriver(pm.Provider.Meter(meterScope), d); err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/maglev", admin.DecapHandler(d, c.Iface, c.Opts))
		mux.Handle("/metrics", pm.Handler)
		a, err := ops.ServeAdmin(c.Admin, mux)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close() }()
		log.Info("admin listening", "url", "http://"+a.Addr().String()+"/debug/maglev")
	}
	// The driver's counters are read until ctx ends, never after the
	// decapsulator is closed.
	dctx, stopDriver := context.WithCancel(ctx)
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		WatchDriver(dctx, d, c.Iface, decapDriverEvery, log)
	}()
	defer func() { stopDriver(); <-driverDone }() // on an error
	<-ctx.Done()
	stopDriver()
	<-driverDone
	st, serr := d.Stats()
	if serr == nil {
		log.Info("decapsulator counters", decapAttrs(st)...)
	}
	if err := d.Close(); err != nil {
		return errors.Join(serr, err)
	}
	log.Info("detached", "iface", c.Iface)
	return serr
}

// decapAttrs returns the counters of st as a log record's attributes:
// decapsulated, passed, malformed, untrusted (dropped), and the second
// chance counters (second_hop: passed on to it, second_local: delivered
// here, second_no_route) if a packet named a second hop.
func decapAttrs(st xdpmaglev.DecapStats) []any {
	attrs := []any{"decapsulated", st.Decapsulated, "passed", st.Passed, "malformed", st.Malformed, "untrusted", st.Untrusted}
	if st.SecondHop+st.SecondLocal+st.SecondNoRoute == 0 {
		return attrs
	}
	return append(attrs, "second_hop", st.SecondHop, "second_local", st.SecondLocal, "second_no_route", st.SecondNoRoute)
}

// sourcesString returns the trusted sources as -decap-sources takes them.
func sourcesString(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p.Bits() == 0 {
			return "any source"
		}
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}

// localAddrs returns a test of whether the kernel delivers an address
// locally: an address of an interface, or one in a prefix on a loopback
// device (the local route of 198.19.200.0/28 on lo covers the 16).
func localAddrs() (func(netip.Addr) bool, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	held := map[netip.Addr]bool{}
	var onLo []netip.Prefix
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			p, ok := netipx(n)
			if !ok {
				continue
			}
			held[p.Addr()] = true
			if i.Flags&net.FlagLoopback != 0 {
				onLo = append(onLo, p.Masked())
			}
		}
	}
	return func(v netip.Addr) bool {
		return held[v] || slices.ContainsFunc(onLo, func(p netip.Prefix) bool { return p.Contains(v) })
	}, nil
}

// netipx returns n as a prefix of its address, unmapped.
func netipx(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	ip = ip.Unmap()
	if ip.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(ip, ones), true
}

// warnDecap logs what is likely wrong with this host as a backend of the
// encapsulating modes: a VIP that is no local address (neither an
// interface's address nor in a prefix on the loopback device: the kernel
// drops the decapsulated packets unless a rule rewrites them, as
// kube-proxy's does for a Service's load-balancer IP), and strict
// reverse path filtering on the
// interface (it may drop them: their source is the client, not the load
// balancer), each with the command that fixes it. A check that cannot be
// made is skipped.
func warnDecap(c config.Decap, log *slog.Logger) {
	if local, err := localAddrs(); err == nil {
		for _, v := range c.Opts.VIPs {
			if !local(v) {
				log.Warn("decap: a VIP is no local address: the kernel drops the decapsulated packets unless a rule delivers them (kube-proxy's, for a Service's load-balancer IP)", "vip", v.String(),
					"fix", fmt.Sprintf("ip addr add %v/%d dev lo", v, v.BitLen()))
			}
		}
	}
	// The kernel filters with the higher of all's and the interface's
	// settings: 1 is strict.
	rp := 0
	for _, dev := range []string{"all", c.Iface} {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + dev + "/rp_filter")
		if err != nil {
			continue
		}
		if v := strings.TrimSpace(string(b)); v == "1" || v == "2" {
			rp = max(rp, int(v[0]-'0'))
		}
	}
	if rp == 1 {
		log.Warn("decap: rp_filter is strict (1): decapsulated packets from clients routed elsewhere are dropped", "iface", c.Iface,
			"fix", "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf."+c.Iface+".rp_filter=2")
	}
}
