package dnstest_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// A zone is a real DNS server on 127.0.0.1 (UDP and TCP, one port)
// answering from records the test changes as it goes.
type zone struct {
	udp, tcp *dns.Server
	addr     string

	mu      sync.Mutex
	records map[string][]dns.RR // by question name and type, "name/TYPE"
	rcode   int                 // answer with this code instead, if not success

	queries atomic.Int64
}

// startZone starts the server, stopped at the end of the test.
func startZone(t *testing.T) *zone {
	t.Helper()
	z := &zone{records: map[string][]dns.RR{}}
	// UDP and TCP on one port, as a resolver expects: the UDP port the
	// kernel picks may be taken on TCP (by another test's connection, say),
	// so pick again until both are free.
	var pc net.PacketConn
	var l net.Listener
	for try := 0; ; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		z.addr = pc.LocalAddr().String()
		if l, err = net.Listen("tcp", z.addr); err == nil {
			break
		}
		_ = pc.Close()
		if try == 20 {
			t.Fatalf("no port free for both UDP and TCP: %v", err)
		}
	}
	h := dns.HandlerFunc(z.serve)
	z.udp = &dns.Server{PacketConn: pc, Handler: h}
	z.tcp = &dns.Server{Listener: l, Handler: h}
	for _, s := range []*dns.Server{z.udp, z.tcp} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return z
}

func (z *zone) serve(w dns.ResponseWriter, req *dns.Msg) {
	z.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	z.mu.Lock()
	if z.rcode != dns.RcodeSuccess {
		m.Rcode = z.rcode
	} else if len(req.Question) == 1 {
		q := req.Question[0]
		rrs := z.records[q.Name+"/"+dns.TypeToString[q.Qtype]]
		m.Answer = append(m.Answer, rrs...)
		if rrs == nil && !z.known(q.Name) {
			m.Rcode = dns.RcodeNameError
		}
	}
	z.mu.Unlock()
	_ = w.WriteMsg(m)
}

// known reports whether the zone has any record of name. Caller holds z.mu.
func (z *zone) known(name string) bool {
	for k, rrs := range z.records {
		if len(rrs) > 0 && strings.HasPrefix(k, name+"/") {
			return true
		}
	}
	return false
}

// set replaces the records of a name and type with the given ones, in
// presentation format ("web.test. 1 IN A 127.0.0.1").
func (z *zone) set(t *testing.T, name, typ string, rrs ...string) {
	t.Helper()
	var parsed []dns.RR
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("record %q: %v", s, err)
		}
		parsed = append(parsed, rr)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.records[name+"/"+typ] = parsed
}

// setRcode makes the server answer every query with rcode
// (dns.RcodeSuccess for the records again).
func (z *zone) setRcode(rcode int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rcode = rcode
}

// resolver returns a resolver that asks this server and no other.
func (z *zone) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, z.addr)
		},
	}
}
