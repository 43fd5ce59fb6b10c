package xdpmaglev

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/maglevlb/maglev/quiclb"
)

func TestQUICSmoke(t *testing.T) {
	lb := newLB(t, Options{M: 7})
	svc := Service{VIP: vip(false, 443), Proto: UDP}
	bs := testBackends(1, 3, false)
	for _, key := range [][]byte{nil, bytes.Repeat([]byte{9}, 16)} {
		for _, nonce := range []int{13, 6} {
			cfg := quiclb.Config{ID: 1, ServerIDLen: 3, NonceLen: nonce, Key: key}
			sids := map[netip.Addr]quiclb.ServerID{}
			for i, b := range bs {
				sids[b.Addr], _ = quiclb.MakeServerID([]byte{0xa, 0xb, byte(i)})
			}
			if err := lb.SetServiceOptions(svc, bs, ServiceOptions{QUIC: &QUIC{Configs: []QUICConfig{{Config: cfg, ServerIDs: sids}}}}); err != nil {
				t.Fatal(err)
			}
			for i, b := range bs {
				g, err := quiclb.NewGenerator(cfg, sids[b.Addr])
				if err != nil {
					t.Fatal(err)
				}
				cid, _ := g.Append(nil)
				payload := append([]byte{0x40}, cid...)
				payload = append(payload, make([]byte, 30)...)
				for port := uint16(1000); port < 1010; port++ {
					v, out := run(t, lb, packet(client(false, port), svc.VIP, 17, payload))
					if v != xdpTX || !bytes.Equal(out[:6], backendMAC(1+i)) {
						t.Fatalf("key %v nonce %d backend %d port %d: verdict %d to %x", key != nil, nonce, i, port, v, out[:6])
					}
				}
			}
			st, _ := lb.Stats()
			t.Logf("%+v", st.QUIC)
		}
	}
}
