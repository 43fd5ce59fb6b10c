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
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// RunDecap is l4lb decap: the decapsulator of -forward ipip and gue
// attached to c.Iface for the VIPs, until ctx ends; then it logs the
// counters and detaches.
func RunDecap(ctx context.Context, c config.Decap, log *slog.Logger) error {
	for _, w := range decapWarnings(c) {
		log.Warn(w)
	}
	d, err := xdpmaglev.AttachDecap(c.Iface, c.Opts)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }() // on an error; the normal path closes it below
	vips := make([]string, len(c.Opts.VIPs))
	for i, a := range c.Opts.VIPs {
		vips[i] = a.String()
	}
	log.Info(fmt.Sprintf("decapsulating IPIP and GUE (port %d) to %s on %s (%v), from %s",
		c.Opts.GUEPort, strings.Join(vips, ","), c.Iface, d.Mode(), sourcesString(c.Opts.Sources)))
	if c.Admin != "" {
		mux := http.NewServeMux()
		mux.Handle("/debug/maglev", admin.DecapHandler(d, c.Iface, c.Opts))
		a, err := ops.ServeAdmin(c.Admin, mux)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close() }()
		log.Info(fmt.Sprintf("admin on http://%s/debug/maglev", a.Addr()))
	}
	<-ctx.Done()
	st, serr := d.Stats()
	if serr == nil {
		log.Info(fmt.Sprintf("%d packets decapsulated, %d passed, %d malformed, %d from untrusted sources dropped%s", st.Decapsulated, st.Passed, st.Malformed, st.Untrusted, secondHops(st)))
	}
	if err := d.Close(); err != nil {
		return errors.Join(serr, err)
	}
	log.Info(fmt.Sprintf("detached from %s", c.Iface))
	return serr
}

// secondHops returns the second chance counters of st for the last
// status line, or "" if no packet named a second hop.
func secondHops(st xdpmaglev.DecapStats) string {
	if st.SecondHop+st.SecondLocal+st.SecondNoRoute == 0 {
		return ""
	}
	return fmt.Sprintf("; of those that named a second hop, %d passed on to it, %d delivered here, %d with no route to it", st.SecondHop, st.SecondLocal, st.SecondNoRoute)
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

// decapWarnings returns what is likely wrong with this host as a backend
// of the encapsulating modes: a VIP on no interface (the kernel drops the
// decapsulated packets), and strict reverse path filtering on the
// interface (it may drop them: their source is the client, not the load
// balancer). A check that cannot be made is skipped.
func decapWarnings(c config.Decap) []string {
	var out []string
	if addrs, err := net.InterfaceAddrs(); err == nil {
		held := map[netip.Addr]bool{}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					held[ip.Unmap()] = true
				}
			}
		}
		for _, v := range c.Opts.VIPs {
			if !held[v] {
				out = append(out, fmt.Sprintf("-decap: VIP %v is on no interface: the kernel drops the decapsulated packets (ip addr add %v/%d dev lo)", v, v, v.BitLen()))
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
		out = append(out, fmt.Sprintf("-decap: rp_filter on %s is strict (1): decapsulated packets from clients routed elsewhere are dropped; sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.%s.rp_filter=2", c.Iface, c.Iface))
	}
	return out
}
