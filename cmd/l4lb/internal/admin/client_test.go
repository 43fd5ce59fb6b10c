package admin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// fakeAPI serves the answers of a running l4lb of two services, web (two
// backends, one draining) and dns (one, down by its health check), with
// BGP, and records the drains asked of it.
func fakeAPI(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	var drains []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/maglev", func(w http.ResponseWriter, r *http.Request) {
		st := Status{Attach: "native", Services: []ServiceStatus{
			{Name: "dns", Service: "udp/198.19.0.1:53", Forward: "gue", Conntrack: "off", SecondChance: "10m0s", Table: TableSummary{Size: 251, Backends: []TableBackend{{Addr: "198.18.0.13", Weight: 1, Slots: 0}}}},
			{Name: "web", Service: "tcp/198.19.0.1:80", Forward: "l2", Conntrack: "on", Table: TableSummary{Size: 251, Backends: []TableBackend{{Addr: "198.18.0.11", Weight: 1, Slots: 251}, {Addr: "198.18.0.12", Weight: 0, Slots: 0}}}},
		}, BGP: &bgp.Status{ASN: 65001, Peers: []bgp.PeerStatus{{Addr: "198.18.1.1", ASN: 65000, State: "established"}, {Addr: "198.18.1.2", ASN: 65000, State: "idle", BFD: "down"}},
			VIPs: []bgp.RouteStatus{{Prefix: "198.19.0.1/32", Announced: true}}}}
		st.Stats.Services = []xdpmaglev.ServiceStats{{Name: "tcp/198.19.0.1:80", Packets: 12, Backends: []xdpmaglev.BackendStats{
			{Addr: netip.MustParseAddr("198.18.0.11"), Packets: 10}, {Addr: netip.MustParseAddr("198.18.0.12"), Packets: 2}}}}
		ops.WriteJSON(w, st)
	})
	mux.HandleFunc("GET /debug/maglev/services", func(w http.ResponseWriter, r *http.Request) {
		ops.WriteJSON(w, []pool.Status{
			{Name: "dns", Service: "udp/198.19.0.1:53", Digest: "d1", Health: "tcp connect", FailOpen: true, Backends: []pool.BackendStatus{
				{Addr: "198.18.0.13", Weight: 1, State: "down", Member: true, Health: "down", HealthFailed: 3}}},
			{Name: "web", Service: "tcp/198.19.0.1:80", Digest: "d2", Health: "none", Backends: []pool.BackendStatus{
				{Addr: "198.18.0.11", Weight: 1, State: "live", Member: true},
				{Addr: "198.18.0.12", Weight: 0, State: "draining", DrainLeft: "59s", Member: true, Drained: true}}},
		})
	})
	for path, on := range map[string]string{"POST /drain": "drain", "POST /undrain": "undrain"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			drains = append(drains, on+" "+r.FormValue("addr")+" "+r.FormValue("service"))
			switch r.FormValue("addr") {
			case "198.18.0.99":
				http.Error(w, "l4lb: 198.18.0.99 is no backend of any service (looked in dns, web): not a member, nor draining", http.StatusNotFound)
			case "198.18.0.11":
				ops.WriteJSON(w, []pool.Status{{Name: "web"}})
			case "198.18.0.14": // an answer of another shape than the API's
				ops.WriteJSON(w, pool.Status{Name: "web"})
			default:
				ops.WriteJSON(w, []pool.Status{{Name: "dns"}, {Name: "web"}})
			}
		})
	}
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		ops.WriteJSON(w, map[string]string{"reloaded": "2 services: added none, changed web, removed none, 1 unchanged"})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &drains
}

// TestReportTable: the report joins the two pages by service (slots from
// the table in use, packets from the data plane's counters), and the
// table shows each service and backend in aligned columns, and BGP (a
// peer's BFD session with -bgp-bfd).
func TestReportTable(t *testing.T) {
	srv, _ := fakeAPI(t)
	c := &Client{Addr: strings.TrimPrefix(srv.URL, "http://")}
	r, err := c.Report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Services) != 2 || r.Services[1].Name != "web" || r.Services[1].Packets != 12 || r.Services[1].Backends[0].Slots != 251 ||
		r.Services[1].Backends[1].Packets != 2 || r.Services[0].Forward != "gue" || r.Services[0].Conntrack != "off" || r.Services[0].Second != "10m0s" || r.Services[1].Second != "" || !r.Services[0].FailOpen || r.BGP == nil {
		t.Fatalf("report %+v", r)
	}
	var b strings.Builder
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	want := "attach native, 2 services\n" +
		"SERVICE            NAME                 FORWARD                            TABLE  HEALTH CHECK\n" +
		"  -> BACKEND       STATE                WEIGHT                             SLOTS  HEALTH                      PACKETS\n" +
		"udp/198.19.0.1:53  dns                  gue, stateless, second chance 10m  251    tcp connect (FAILING OPEN)\n" +
		"  -> 198.18.0.13   down                 1                                  0      down 0/3                    0\n" +
		"tcp/198.19.0.1:80  web                  l2                                 251    none\n" +
		"  -> 198.18.0.11   live                 1                                  251    -                           10\n" +
		"  -> 198.18.0.12   draining (59s left)  0                                  0      -                           2\n" +
		"bgp AS 65001: peers 198.18.1.1 (AS 65000) established, 198.18.1.2 (AS 65000) idle (BFD down); routes 198.19.0.1/32 announced\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, w := range []string{"draining (59s left)", "down 0/3", "tcp connect (FAILING OPEN)", "  -> 198.18.0.12"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the table lacks %q:\n%s", w, b.String())
		}
	}
}

// TestForwardOf: the table's forwarding cell says stateless and the
// second chance window, the window without its units of zero.
func TestForwardOf(t *testing.T) {
	for _, tc := range []struct {
		s    ServiceReport
		want string
	}{
		{ServiceReport{Forward: "l2", Conntrack: "on"}, "l2"},
		{ServiceReport{Forward: "l2", Conntrack: "off"}, "l2, stateless"},
		{ServiceReport{Forward: "gue", Conntrack: "on", Second: "10m0s"}, "gue, second chance 10m"},
		{ServiceReport{Forward: "gue", Conntrack: "off", Second: "1h0m0s"}, "gue, stateless, second chance 1h"},
		{ServiceReport{Forward: "gue", Second: "1h30m0s"}, "gue, second chance 1h30m"},
		{ServiceReport{Forward: "gue", Second: "2h30m0s"}, "gue, second chance 2h30m"},
		{ServiceReport{Forward: "gue", Second: "10s"}, "gue, second chance 10s"},
		{ServiceReport{Forward: "gue", Second: "1m30s"}, "gue, second chance 1m30s"},
		{ServiceReport{Forward: "gue", Second: "500ms"}, "gue, second chance 500ms"},
		{ServiceReport{Forward: "ipip"}, "ipip"}, // an older l4lb's answer, without conntrack
	} {
		if got := forwardOf(tc.s); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestClientDrainReload: Drain asks the right path with addr and
// service, reads the list of one service or several, refuses an answer of
// another shape, and a 404 is an APIError with the API's message; Reload
// returns what was done.
func TestClientDrainReload(t *testing.T) {
	srv, drains := fakeAPI(t)
	c := &Client{Addr: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	if got, err := c.Drain(ctx, "198.18.0.11", "web", true); err != nil || len(got) != 1 || got[0].Name != "web" {
		t.Errorf("drain in web: %+v, %v", got, err)
	}
	if got, err := c.Drain(ctx, "198.18.0.12", "", false); err != nil || len(got) != 2 {
		t.Errorf("undrain everywhere: %+v, %v", got, err)
	}
	_, err := c.Drain(ctx, "198.18.0.99", "", true)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || err.Error() != "l4lb: 198.18.0.99 is no backend of any service (looked in dns, web): not a member, nor draining" {
		t.Errorf("drain of no backend: %v", err)
	}
	if got, err := c.Drain(ctx, "198.18.0.14", "web", true); err == nil || got != nil || !strings.Contains(err.Error(), "POST /drain: json: cannot unmarshal object") {
		t.Errorf("drain answered by an object: %+v, %v; want an error", got, err)
	}
	if got := strings.Join(*drains, "; "); got != "drain 198.18.0.11 web; undrain 198.18.0.12 ; drain 198.18.0.99 ; drain 198.18.0.14 web" {
		t.Errorf("requests %q", got)
	}
	if did, err := c.Reload(ctx); err != nil || did != "2 services: added none, changed web, removed none, 1 unchanged" {
		t.Errorf("reload: %q, %v", did, err)
	}
	if _, err := (&Client{Addr: "127.0.0.1:1"}).Reload(ctx); err == nil || !strings.Contains(err.Error(), "the admin API of l4lb at 127.0.0.1:1") {
		t.Errorf("no l4lb: %v", err)
	}
}

// TestReportQUIC: a QUIC-LB service's table shows its configurations (the
// one in force, and the earlier one a rotation keeps), each backend's
// server ID after its address, and the counters by route and reason.
func TestReportQUIC(t *testing.T) {
	r := Report{Attach: "native", Services: []ServiceReport{{Name: "h3", Service: "udp/198.19.0.1:443", Forward: "gue", Conntrack: "on", Second: "10m0s", TableSize: 251, Health: "none",
		QUIC:     []pool.QUICStatus{{ID: 2, Mode: "single-pass", InForce: true}, {ID: 1, Mode: "four-pass"}},
		Backends: []BackendReport{{BackendStatus: pool.BackendStatus{Addr: "198.18.0.11", Weight: 1, State: "live", ServerID: "0a0b"}, Slots: 251, Packets: 7}}}},
		QUIC: &QUICCounts{CID: 120, Decrypted: 3, Table: map[string]uint64{"initial": 6, "unknown_server": 1, "short": 0}}}
	var b strings.Builder
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"gue, second chance 10m, quic-lb 2 (single-pass) +1  251",
		"  -> 198.18.0.11@0a0b  live",
		"quic-lb: 120 packets by connection ID (3 decrypted); by the table: initial 6, unknown_server 1\n",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the table lacks %q:\n%s", w, b.String())
		}
	}
}

// TestReportSecondHops: while a service has second hops, its table says
// until when, and where those it started with came from; join takes
// both from the service's status.
func TestReportSecondHops(t *testing.T) {
	st := Status{Attach: "native", Services: []ServiceStatus{{Name: "web", Service: "tcp/198.19.0.1:80", Forward: "gue", Conntrack: "off", SecondChance: "10m0s"}}}
	svcs := []pool.Status{{Name: "web", Service: "tcp/198.19.0.1:80", Health: "none", SecondHopsUntil: "2026-12-07T05:00:00Z", Handoff: "peer 198.18.0.3:9181"}}
	r := join(st, svcs)
	if s := r.Services[0]; s.SecondHopsUntil != "2026-12-07T05:00:00Z" || s.Handoff != "peer 198.18.0.3:9181" {
		t.Fatalf("joined %+v", s)
	}
	var b strings.Builder
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	if w := "  second hops until 2026-12-07T05:00:00Z, taken from the peer 198.18.0.3:9181 at start\n"; !strings.Contains(b.String(), w) {
		t.Errorf("the table lacks %q:\n%s", w, b.String())
	}
	r.Services[0].SecondHopsUntil = ""
	b.Reset()
	if err := WriteTable(&b, r); err != nil || strings.Contains(b.String(), "second hops") {
		t.Errorf("without second hops: %v\n%s", err, b.String())
	}
}
