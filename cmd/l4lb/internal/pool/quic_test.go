package pool

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

func ids(t *testing.T, kv ...string) map[netip.Addr]quiclb.ServerID {
	t.Helper()
	out := map[netip.Addr]quiclb.ServerID{}
	for i := 0; i < len(kv); i += 2 {
		id, err := quiclb.ParseServerID(kv[i+1])
		if err != nil {
			t.Fatal(err)
		}
		out[netip.MustParseAddr(kv[i])] = id
	}
	return out
}

func backends(as ...string) []xdpmaglev.Backend {
	var out []xdpmaglev.Backend
	for _, a := range as {
		out = append(out, xdpmaglev.Backend{Addr: netip.MustParseAddr(a), Weight: 1})
	}
	return out
}

// TestQUICPlan: a rotation to another codepoint keeps the configuration
// in force before, with its backends' server IDs as they were, while a
// backend that left drops out of it; a rotation back to a codepoint in
// use replaces the earlier one; a change in place warns; quic-lb off
// forgets them all.
func TestQUICPlan(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	c0 := &config.QUIC{Config: quiclb.Config{ID: 0, ServerIDLen: 2, NonceLen: 14, Key: k1}}
	c1 := &config.QUIC{Config: quiclb.Config{ID: 1, ServerIDLen: 3, NonceLen: 13, Key: k2}}
	var q quicPlan
	if q.reconfigure(c0, nil) || q.options(nil, nil) == nil {
		t.Fatalf("first: in place, or %+v", q)
	}
	bs := backends("198.18.0.11", "198.18.0.12", "198.18.0.13")
	old := ids(t, "198.18.0.11", "0a0b", "198.18.0.12", "0a0c", "198.18.0.13", "0a0d")
	got := q.options(bs, old)
	if len(got.Configs) != 1 || got.Configs[0].ID != 0 || len(got.Configs[0].ServerIDs) != 3 {
		t.Fatalf("options %+v", got)
	}

	// Rotate to codepoint 1, with new, longer server IDs.
	if q.reconfigure(c1, old) {
		t.Fatal("reported in place")
	}
	cur := ids(t, "198.18.0.11", "01000b", "198.18.0.12", "01000c")
	got = q.options(bs[:2], cur) // .13 left
	if len(got.Configs) != 2 || got.Configs[0].ID != 1 || got.Configs[1].ID != 0 ||
		len(got.Configs[0].ServerIDs) != 2 || len(got.Configs[1].ServerIDs) != 2 ||
		got.Configs[1].ServerIDs[netip.MustParseAddr("198.18.0.12")].String() != "0a0c" {
		t.Fatalf("after the rotation: %+v", got)
	}
	// The same configuration again changes nothing.
	if q.reconfigure(&config.QUIC{Config: c1.Config}, cur) || len(q.prev) != 1 {
		t.Fatalf("the same again: in place, or %+v", q.prev)
	}
	// Back to codepoint 0 with another key: the one of 0 is replaced, and
	// 1's kept.
	c0b := &config.QUIC{Config: quiclb.Config{ID: 0, ServerIDLen: 2, NonceLen: 14, Key: k2}}
	if q.reconfigure(c0b, cur) {
		t.Fatal("reported in place")
	}
	got = q.options(bs, old)
	if len(got.Configs) != 2 || got.Configs[0].ID != 0 || !bytes.Equal(got.Configs[0].Key, k2) || got.Configs[1].ID != 1 {
		t.Fatalf("back to 0: %+v", got)
	}
	// In place: a warning, no earlier configuration of the codepoint.
	c0c := &config.QUIC{Config: quiclb.Config{ID: 0, ServerIDLen: 2, NonceLen: 14}}
	if !q.reconfigure(c0c, old) {
		t.Fatal("a change in place not reported")
	}
	if got = q.options(bs, old); len(got.Configs) != 2 || got.Configs[0].Mode() != quiclb.Plaintext {
		t.Fatalf("in place: %+v", got)
	}
	if q.reconfigure(nil, old); q.options(bs, old) != nil || q.prev != nil {
		t.Fatalf("off: %+v", q)
	}
}

func TestSameOptions(t *testing.T) {
	q := func(k byte, sid string) *xdpmaglev.QUIC {
		id, _ := quiclb.ParseServerID(sid)
		return &xdpmaglev.QUIC{Configs: []xdpmaglev.QUICConfig{{Config: quiclb.Config{ServerIDLen: 2, NonceLen: 6, Key: bytes.Repeat([]byte{k}, 16)},
			ServerIDs: map[netip.Addr]quiclb.ServerID{netip.MustParseAddr("198.18.0.1"): id}}}}
	}
	a := xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, QUIC: q(1, "0a0b")}
	for _, c := range []struct {
		b    xdpmaglev.ServiceOptions
		same bool
	}{
		{xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, QUIC: q(1, "0a0b")}, true},
		{xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, QUIC: q(2, "0a0b")}, false},
		{xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, QUIC: q(1, "0a0c")}, false},
		{xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE}, false},
		{xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardIPIP, QUIC: q(1, "0a0b")}, false},
	} {
		if got := sameOptions(a, c.b); got != c.same {
			t.Errorf("sameOptions(%+v, %+v) = %v", a, c.b, got)
		}
	}
}
