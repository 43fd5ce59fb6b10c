package envoymaglev

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestCReference checks New against testdata/ref/envoy_ref.c, a plain C
// port of Envoy's build loop on the xxHash C library Envoy uses: Envoy's
// test expectations, XXH64 with seeds 0 and 1, and thousands of random host
// sets (keys of any bytes, weights in several regimes, including the
// inexact ratios 1:2, 1:3 and 3:7, one host, no host) at sizes from 7 to
// 65537, every slot compared. It runs when ENVOY_REF names a built
// envoy_ref (see testdata/ref/README.md), as .ci/run does.
func TestCReference(t *testing.T) {
	ref := os.Getenv("ENVOY_REF")
	if ref == "" {
		t.Skip("ENVOY_REF is not set: no C reference to check against (see testdata/ref/README.md)")
	}

	// XXH64 of random bytes, with both of Envoy's seeds.
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 100 {
		b := make([]byte, r.IntN(80))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		seed := uint64(i % 2)
		out, err := exec.Command(ref, "-hash", strconv.FormatUint(seed, 10), hex.EncodeToString(b)).Output()
		if err != nil {
			t.Fatalf("envoy_ref -hash: %v", err)
		}
		d := xxhash.NewWithSeed(seed)
		_, _ = d.Write(b) // a Digest's writes never fail
		if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("%016x", d.Sum64()); got != want {
			t.Errorf("XXH64(%x, seed %d): C %s, Go %s", b, seed, got, want)
		}
	}

	type refCase struct {
		m     int
		hosts []Host
	}
	var cases []refCase
	for _, c := range envoyCases {
		cases = append(cases, refCase{c.m, hostsOf(c.keys, c.weights)})
	}
	cases = append(cases, refCase{7, nil}, refCase{65537, nil}, refCase{7, []Host{{"127.0.0.1:90", 1}}},
		refCase{17, []Host{{"127.0.0.1:90", 7}}}, refCase{65537, []Host{{"h", 1 << 31}}})
	for _, ws := range hardWeights {
		hosts := make([]Host, len(ws))
		for i, w := range ws {
			hosts[i] = Host{Key: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: w}
		}
		for _, m := range []int{7, 17, 101, 1009, 65537} {
			if len(hosts) <= m {
				cases = append(cases, refCase{m, hosts})
			}
		}
	}
	primes := slices.Concat(testPrimes, []int{3, 5, 127, 8209, 16411, 32771})
	for range 3000 {
		m, hosts := randomCase(r, primes)
		cases = append(cases, refCase{m, hosts})
	}

	var in bytes.Buffer
	for _, c := range cases {
		fmt.Fprintf(&in, "%d %d\n", c.m, len(c.hosts))
		for _, h := range c.hosts {
			fmt.Fprintf(&in, "%x %d\n", h.Key, h.Weight)
		}
	}
	cmd := exec.Command(ref, "-batch")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReaderSize(stdout, 1<<20)
	slots, mismatched := 0, 0
	for i, c := range cases {
		buf := make([]byte, 4*c.m)
		if _, err := io.ReadFull(out, buf); err != nil {
			t.Fatalf("case %d: reading the C table: %v: %s", i, err, stderr.Bytes())
		}
		tab, err := New(c.hosts, c.m)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got := tab.AppendSlots(nil)
		diff := 0
		for s := range c.m {
			if binary.LittleEndian.Uint32(buf[4*s:]) != got[s] {
				diff++
			}
		}
		if diff > 0 {
			mismatched += diff
			t.Errorf("case %d: %d hosts, M %d: %d slots differ from the C reference", i, len(c.hosts), c.m, diff)
		}
		slots += c.m
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("envoy_ref -batch: %v: %s", err, stderr.Bytes())
	}
	t.Logf("%d tables, %d slots compared with the C reference: %d mismatched", len(cases), slots, mismatched)
}
