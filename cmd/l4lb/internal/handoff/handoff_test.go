package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// sample is a handoff of a service of 251 slots, three of them with a
// second hop.
func sample(port uint16) xdpmaglev.Handoff {
	svc := xdpmaglev.Service{VIP: netip.AddrPortFrom(netip.MustParseAddr("198.19.0.1"), port), Proto: xdpmaglev.TCP}
	a, b := netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.12")
	h := xdpmaglev.Handoff{Service: svc, M: 251, Backends: []xdpmaglev.Backend{{Addr: a, Weight: 1}, {Addr: b, Weight: 2, Down: true}},
		Hops: []netip.Addr{b, a}, Slots: make([]uint32, 251), Until: time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)}
	h.Slots[1], h.Slots[2], h.Slots[250] = 1, 2, 1
	return h
}

// TestStateFile: what Write writes, Read reads back, each From "state
// file"; no file is nothing; a bad file, or one of another version, is
// an error; a write that cannot be made leaves the file as it was, and
// no temporary file.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	hs, written, err := Read(path)
	if hs != nil || !written.IsZero() || err != nil {
		t.Fatalf("no file: %v, %v, %v", hs, written, err)
	}
	want := []xdpmaglev.Handoff{sample(80), sample(443)}
	before := time.Now()
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, written, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].From = "state file"
	}
	if !reflect.DeepEqual(got, want) || written.Before(before.Add(-time.Second)) || time.Since(written) > time.Minute {
		t.Errorf("read back %+v, written %v\nwant %+v", got, written, want)
	}
	for _, bad := range []string{"{", `{"v":2,"handoffs":[]}`, `{"v":1,"handoffs":[{"v":1,"service":"tcp/198.19.0.1:80","m":250}]}`} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if hs, _, err := Read(path); err == nil || hs != nil || !strings.Contains(err.Error(), "state file") {
			t.Errorf("%s: %v, %v; want an error", bad, hs, err)
		}
	}
	if err := Write(filepath.Join(dir, "none", "state.json"), want); err == nil {
		t.Error("a write into a missing directory: no error")
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 { // root writes anyway
		if err := Write(path, want); err == nil {
			t.Error("a write into a read-only directory: no error")
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("the directory holds %v (%v), want the state file alone", entries, err)
	}
}

// TestAsk: a starting load balancer asks its peers all at once, on
// loopback: one answers (each handoff From "peer ADDR"), one is too slow
// (its answer is dropped at the wait), one is not there, one answers an
// error status, one answers what is not handoffs; every answer comes in
// the peers' order, within the wait.
func TestAsk(t *testing.T) {
	hs := []xdpmaglev.Handoff{sample(80)}
	serve := func(h http.HandlerFunc) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	good := serve(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(hs)
	})
	release := make(chan struct{})
	slow := serve(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_ = json.NewEncoder(w).Encode(hs)
	})
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	failing := serve(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
	junk := serve(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, `[{"v":1,"service":"tcp/198.19.0.1:80","m":250}]`)
	})

	const wait = 500 * time.Millisecond
	start := time.Now()
	got := Ask(context.Background(), []string{good, slow, gone, failing, junk}, wait)
	if took := time.Since(start); took < wait || took > wait+time.Second {
		t.Errorf("Ask took %v, want the wait, %v", took, wait)
	}
	if len(got) != 5 {
		t.Fatalf("%d answers", len(got))
	}
	want := sample(80)
	want.From = "peer " + good
	if got[0].Peer != good || got[0].Err != nil || len(got[0].Handoffs) != 1 || !reflect.DeepEqual(got[0].Handoffs[0], want) {
		t.Errorf("the good peer: %+v", got[0])
	}
	if !errors.Is(got[1].Err, context.DeadlineExceeded) {
		t.Errorf("the slow peer: %+v, want the wait's deadline", got[1])
	}
	for i, name := range map[int]string{2: "the peer not there", 3: "the failing peer", 4: "the peer of junk"} {
		if got[i].Err == nil || got[i].Handoffs != nil {
			t.Errorf("%s: %+v, want an error", name, got[i])
		}
	}
	if !errors.Is(got[4].Err, xdpmaglev.ErrHandoff) || !strings.Contains(got[3].Err.Error(), "500") {
		t.Errorf("the errors say %v and %v", got[3].Err, got[4].Err)
	}
}

// TestWriterAndHandler: a real data plane's handoffs are what the
// handler serves and what the writer writes, at once, after each change
// it is told of, and a last time at Close.
func TestWriterAndHandler(t *testing.T) {
	xdptest.Need(t)
	lb, err := xdpmaglev.Load("", xdpmaglev.Options{ConntrackSize: 1 << 10, MaxServices: 4, MaxBackends: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := sample(80).Service
	opts := xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, Source: netip.MustParseAddr("198.18.0.3"), SecondChance: time.Minute, M: 251}
	set := func(n int) {
		var bs []xdpmaglev.Backend
		for i := range n {
			bs = append(bs, xdpmaglev.Backend{Addr: netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)}), Weight: 1})
		}
		if err := lb.SetService(svc, bs, opts); err != nil {
			t.Fatal(err)
		}
	}
	set(3)
	path := filepath.Join(t.TempDir(), "state.json")
	var logs nstest.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	w := NewWriter(path, lb, log)
	w.Changed() // before Start: nothing
	if _, err := os.Stat(path); err == nil {
		t.Fatal("a writer not started wrote")
	}
	w.Start()
	fileIs := func(want []xdpmaglev.Handoff) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, _, err := Read(path)
			for i := range got {
				got[i].From = ""
			}
			if err == nil && len(got) == len(want) && (len(want) == 0 || got[0].Until.Equal(want[0].Until) && reflect.DeepEqual(got[0].Slots, want[0].Slots)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the state file holds %+v (%v)\nwant %+v", got, err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fileIs(lb.Handoffs())
	set(4)
	hs := lb.Handoffs()
	if len(hs) != 1 || hs[0].Slots == nil {
		t.Fatalf("after a change: %+v", hs)
	}
	w.Changed()
	fileIs(hs)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(lb), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	a := Ask(context.Background(), []string{ln.Addr().String()}, Wait)[0]
	if a.Err != nil || len(a.Handoffs) != 1 || !a.Handoffs[0].Until.Equal(hs[0].Until) || !reflect.DeepEqual(a.Handoffs[0].Slots, hs[0].Slots) {
		t.Errorf("served %+v", a)
	}
	resp, err := http.Post("http://"+ln.Addr().String()+Path, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s", resp.Status)
	}

	// A load balancer that starts takes the state file's handoff first,
	// then the peer's; its service takes the first, whose table is its
	// own; a peer that is not there is logged.
	lb2, err := xdpmaglev.Load("", xdpmaglev.Options{ConntrackSize: 1 << 10, MaxServices: 4, MaxBackends: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb2.Close() })
	var logs2 nstest.LogBuffer
	Take(context.Background(), lb2, path, []string{ln.Addr().String(), "127.0.0.1:1"}, slog.New(slog.NewJSONHandler(&logs2, nil)))
	if err := lb2.SetService(svc, lb.Backends(svc), opts); err != nil {
		t.Fatal(err)
	}
	if until, from := lb2.SecondHops(svc); from != "state file" || !until.Equal(hs[0].Until) {
		t.Errorf("the service took %q, until %v; want the state file's, until %v", from, until, hs[0].Until)
	}
	for _, want := range [][]string{
		{"handoff: took the state file", "path", path, "services", "1"},
		{"handoff: took a peer's", "peer", ln.Addr().String(), "services", "1"},
		{"handoff: a peer did not answer", "peer", "127.0.0.1:1"},
	} {
		if !slices.ContainsFunc(logs2.Records(), func(r nstest.Record) bool { return r.Is(want[0], want[1:]...) }) {
			t.Errorf("Take did not log %q:\n%s", want, logs2.String())
		}
	}

	if err := lb.DeleteService(svc); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fileIs(nil)
	w.Changed() // after Close: nothing, and no panic
	w.Close()
	if rs := logs.Records(); slices.ContainsFunc(rs, func(r nstest.Record) bool { return r.Is("handoff: writing the state file failed") }) {
		t.Errorf("the writer logged a failure:\n%s", logs.String())
	}
	var none *Writer // no state file
	none.Start()
	none.Changed()
	none.Close()
	if NewWriter("", lb, log) != nil {
		t.Error("NewWriter without a path: not nil")
	}
}
