package admin

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/maglevlb/maglev/cmd/internal/ops"
)

// WriteTable writes r as l4lb status shows it, a table in the manner of
// ipvsadm -Ln: a line per service (its name, PROTO/VIP:PORT, forwarding
// with stateless, the second chance window and the QUIC-LB
// configurations if so, table size, health check), under it a line per
// backend (its address, and QUIC-LB server ID if any, state, weight,
// slots in the table in use, health, and the packets forwarded to it)
// and, while the service has second hops, when they end,
// then the QUIC-LB counters and BGP's peers and routes. The data plane counts packets, not
// connections: a backend's packets since it joined the service are what
// the table shows, and what a drain's progress can be judged by.
func WriteTable(w io.Writer, r Report) error {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	// The tabwriter holds the cells in memory until Flush, whose error
	// is the only one there can be.
	printf := func(format string, a ...any) { _, _ = fmt.Fprintf(tw, format, a...) }
	printf("attach %s, %s\n", r.Attach, ops.Count(len(r.Services), "service"))
	printf("SERVICE\tNAME\tFORWARD\tTABLE\tHEALTH CHECK\t\n")
	printf("  -> BACKEND\tSTATE\tWEIGHT\tSLOTS\tHEALTH\tPACKETS\n")
	for _, s := range r.Services {
		health := s.Health
		if s.FailOpen {
			health += " (FAILING OPEN)"
		}
		printf("%s\t%s\t%s\t%d\t%s\t\n", s.Service, s.Name, forwardOf(s), s.TableSize, health)
		for _, b := range s.Backends {
			state := b.State
			if b.DrainLeft != "" {
				state += " (" + b.DrainLeft + " left)"
			}
			addr := b.Addr
			if b.ServerID != "" {
				addr += "@" + b.ServerID
			}
			printf("  -> %s\t%s\t%d\t%d\t%s\t%d\n", addr, state, b.Weight, b.Slots, healthOf(b.Health, b.HealthOK, b.HealthFailed), b.Packets)
		}
		if s.SecondHopsUntil != "" {
			from := ""
			if s.Handoff != "" {
				from = ", taken from the " + s.Handoff + " at start"
			}
			printf("  second hops until %s%s\n", s.SecondHopsUntil, from)
		}
		if s.Error != "" {
			printf("  the last update failed: %s\n", s.Error)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for l := range strings.Lines(buf.String()) { // the cells that end a line are padded too
		if _, err := io.WriteString(w, strings.TrimRight(l, " \n")+"\n"); err != nil {
			return err
		}
	}
	if err := writeQUIC(w, r.QUIC); err != nil {
		return err
	}
	return writeBGP(w, r)
}

// writeQUIC writes the data plane's QUIC-LB counters, if a service has
// quic-lb on: "quic-lb: 120 packets by connection ID (3 decrypted); by the
// table: initial 6, unknown_server 1".
func writeQUIC(w io.Writer, q *QUICCounts) error {
	if q == nil {
		return nil
	}
	var table []string
	for _, r := range slices.Sorted(maps.Keys(q.Table)) {
		if q.Table[r] > 0 {
			table = append(table, fmt.Sprintf("%s %d", r, q.Table[r]))
		}
	}
	if len(table) == 0 {
		table = []string{"none"}
	}
	_, err := fmt.Fprintf(w, "quic-lb: %s by connection ID (%d decrypted); by the table: %s\n", ops.Count(q.CID, "packet"), q.Decrypted, strings.Join(table, ", "))
	return err
}

// forwardOf is a service's forwarding for the table, with what differs
// from connection tracking without second chance: "gue", "gue, second
// chance 10m", "l2, stateless", "gue, stateless, second chance 1h30m".
func forwardOf(s ServiceReport) string {
	out := s.Forward
	if s.Conntrack == "off" {
		out += ", stateless"
	}
	if s.Second != "" {
		out += ", second chance " + shortDuration(s.Second)
	}
	for i, q := range s.QUIC {
		if i == 0 {
			out += fmt.Sprintf(", quic-lb %d (%s)", q.ID, q.Mode)
		} else {
			out += fmt.Sprintf(" +%d", q.ID) // an earlier configuration, still decoded
		}
	}
	return out
}

// shortDuration drops a duration's units of zero after its first: "10m"
// of "10m0s", "1h" of "1h0m0s"; anything else stays as it is.
func shortDuration(d string) string {
	for _, zero := range []string{"0s", "0m"} {
		if t := strings.TrimSuffix(d, zero); t != d && t != "" && !strings.HasSuffix(t, ".") && (t[len(t)-1] < '0' || t[len(t)-1] > '9') {
			d = t
		}
	}
	return d
}

// healthOf is a backend's health for the table: "-" with no check, else
// its state and the probes in a row ("up 2/0": passed 2, failed 0).
func healthOf(state string, ok, failed int) string {
	if state == "" {
		return "-"
	}
	return state + " " + strconv.Itoa(ok) + "/" + strconv.Itoa(failed)
}

// writeBGP writes the BGP speaker's peers (with their BFD sessions', with
// -bgp-bfd) and routes, if it has one.
func writeBGP(w io.Writer, r Report) error {
	if r.BGP == nil {
		return nil
	}
	b := r.BGP
	var peers, routes []string
	for _, p := range b.Peers {
		peer := fmt.Sprintf("%s (AS %d) %s", p.Addr, p.ASN, p.State)
		if p.BFD != "" {
			peer += " (BFD " + p.BFD + ")"
		}
		peers = append(peers, peer)
	}
	for _, v := range b.VIPs {
		state := "withdrawn"
		if v.Announced {
			state = "announced"
		}
		routes = append(routes, fmt.Sprintf("%s %s", v.Prefix, state))
	}
	_, err := fmt.Fprintf(w, "bgp AS %d: peers %s; routes %s\n", b.ASN, strings.Join(peers, ", "), strings.Join(routes, ", "))
	if err == nil && b.Leaving != "" {
		_, err = fmt.Fprintf(w, "bgp: leaving: %s\n", b.Leaving)
	}
	return err
}
