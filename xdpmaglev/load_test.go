package xdpmaglev

import (
	"testing"
)

// BenchmarkLoad measures Load: a fresh data plane (every map made, the
// program verified), and a restart's adopting Load of pinned maps (the
// program verified against them); each reports ms/op. Load verifies
// xdp_maglev alone: the benchmark and test programs are an object of their
// own (bpf/bench.c), which only the tests load.
func BenchmarkLoad(b *testing.B) {
	needBPF(b)
	opts := Options{ConntrackSize: 1 << 16, MaxServices: 16, MaxBackends: 256, M: 1021, SourceMAC: lbMAC}
	b.Run("fresh", func(b *testing.B) {
		for range b.N {
			lb, err := Load("", opts)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = lb.Close()
			b.StartTimer()
		}
	})
	b.Run("adopt", func(b *testing.B) {
		o := opts
		o.PinPath = bpffs(b)
		lb, err := Load("", o)
		if err != nil {
			b.Fatal(err)
		}
		if err := lb.SetService(Service{VIP: vip(false, 80), Proto: TCP}, testBackends(1, 8, false), ServiceOptions{}); err != nil {
			b.Fatal(err)
		}
		_ = lb.Release()
		b.ResetTimer()
		for range b.N {
			lb, err := Load("", o)
			if err != nil {
				b.Fatal(err)
			}
			if !lb.Adopted() {
				b.Fatal("not adopted")
			}
			b.StopTimer()
			_ = lb.Release()
			b.StartTimer()
		}
		b.StopTimer()
		if lb, err := Load("", o); err == nil {
			_ = lb.Close()
		}
	})
}
