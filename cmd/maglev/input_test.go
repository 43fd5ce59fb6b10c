package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/maglevlb/maglev"
)

func TestReadBackends(t *testing.T) {
	const text = "# the web tier\nweb1 3\r\n\n  web2\t  # canary\nweb3 0\nweb4 4294967295 # the last one"
	l, err := readBackends("b.txt", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []maglev.Backend{{Name: "web1", Weight: 3}, {Name: "web2", Weight: 1}, {Name: "web3", Weight: 0}, {Name: "web4", Weight: math.MaxUint32}}
	if !slices.Equal(l.backends, want) || !l.weighted {
		t.Errorf("got %v, weighted %v; want %v, weighted", l.backends, l.weighted, want)
	}
	for name, line := range map[string]int{"web1": 2, "web2": 4, "web3": 5, "web4": 6} {
		if l.line[name] != line {
			t.Errorf("%s on line %d, want %d", name, l.line[name], line)
		}
	}
	// Without weights, the list is unweighted.
	l, err = readBackends("b.txt", strings.NewReader("a\nb\n"))
	if err != nil || l.weighted || len(l.backends) != 2 || l.backends[1] != (maglev.Backend{Name: "b", Weight: 1}) {
		t.Errorf("got %+v, %v; want a and b, weight 1, unweighted", l, err)
	}
}

func TestReadBackendsErrors(t *testing.T) {
	long := strings.Repeat("x", maxLine+1)
	tests := []struct{ text, err string }{
		{"", "b.txt: no backends"},
		{"# nothing but comments\n\n   \n", "b.txt: no backends"},
		{"a\nb\na 2\n", `b.txt:3: duplicate name "a" (first on line 1)`},
		{"a\n\n# c\nb\nb\n", `b.txt:5: duplicate name "b" (first on line 4)`},
		{"a\nb x\n", `b.txt:2: bad weight "x": want an integer from 0 to 4294967295`},
		{"a -1\n", `b.txt:1: bad weight "-1": want an integer from 0 to 4294967295`},
		{"a 4294967296\n", `b.txt:1: bad weight "4294967296": want an integer from 0 to 4294967295`},
		{"a 1.5\n", `b.txt:1: bad weight "1.5": want an integer from 0 to 4294967295`},
		{"a\nb 1 2\n", `b.txt:2: unexpected "2" after the weight`},
		{"a\n" + long + "\nb\n", "b.txt:2: line longer than 1048576 bytes"},
	}
	for _, tt := range tests {
		l, err := readBackends("b.txt", strings.NewReader(tt.text))
		if err == nil || err.Error() != tt.err {
			t.Errorf("%.40q: got %+v, %v; want error %q", tt.text, l, err, tt.err)
		}
	}
	// A read error is reported as such.
	_, err := readBackends("b.txt", iotest.ErrReader(errors.New("disk on fire")))
	if err == nil || err.Error() != "reading b.txt: disk on fire" {
		t.Errorf("got %v, want the read error", err)
	}
}

func TestParseBackend(t *testing.T) {
	for _, tt := range []struct {
		s         string
		b         maglev.Backend
		hasWeight bool
		err       string
	}{
		{s: "x", b: maglev.Backend{Name: "x", Weight: 1}},
		{s: " x  7 ", b: maglev.Backend{Name: "x", Weight: 7}, hasWeight: true},
		{s: "x 0", b: maglev.Backend{Name: "x"}, hasWeight: true},
		{s: "", err: "empty name"},
		{s: " \t ", err: "empty name"},
		{s: "x y", err: `bad weight "y": want an integer from 0 to 4294967295`},
		{s: "x 1 z", err: `unexpected "z" after the weight`},
	} {
		b, hasWeight, err := parseBackend(tt.s)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%q: got %v, %v; want error %q", tt.s, b, err, tt.err)
			}
			continue
		}
		if err != nil || b != tt.b || hasWeight != tt.hasWeight {
			t.Errorf("%q: got %v, %v, %v; want %v, %v", tt.s, b, hasWeight, err, tt.b, tt.hasWeight)
		}
	}
}

// drain returns every key of ks and the error that ended it (nil for
// io.EOF).
func drain(ks keyStream) ([]string, error) {
	var keys []string
	for {
		k, err := ks.next()
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return keys, err
		}
		keys = append(keys, string(k))
	}
}

func TestLineKeys(t *testing.T) {
	const text = "a\r\n\nb  \n\n\n#c\r\n\r\nlast"
	ks := newLineKeys("k.txt", strings.NewReader(text), int64(len(text)))
	if f := ks.fraction(); f != 0 {
		t.Errorf("fraction before reading %v, want 0", f)
	}
	keys, err := drain(ks)
	if want := []string{"a", "b  ", "#c", "last"}; err != nil || !slices.Equal(keys, want) {
		t.Errorf("got %q, %v; want %q", keys, err, want)
	}
	if f := ks.fraction(); f != 1 {
		t.Errorf("fraction after reading %v, want 1", f)
	}
	// io.EOF again after the end.
	if _, err := ks.next(); err != io.EOF {
		t.Errorf("after the end: %v, want io.EOF", err)
	}
	if f := newLineKeys("stdin", strings.NewReader(text), 0).fraction(); f != -1 {
		t.Errorf("fraction of a stream of unknown size %v, want -1", f)
	}

	long := strings.Repeat("k", maxLine+1)
	keys, err = drain(newLineKeys("k.txt", strings.NewReader("a\n\nb\n"+long+"\nc\n"), 0))
	if err == nil || err.Error() != "k.txt:4: line longer than 1048576 bytes" || !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("got %q, %v; want a, b and the error for line 4", keys, err)
	}
	// A key of exactly maxLine bytes, with its newline, is accepted.
	keys, err = drain(newLineKeys("k.txt", strings.NewReader(long[:maxLine-1]+"\n"), 0))
	if err != nil || len(keys) != 1 || len(keys[0]) != maxLine-1 {
		t.Errorf("a %d-byte key: got %d keys, %v", maxLine-1, len(keys), err)
	}
	keys, err = drain(newLineKeys("k.txt", io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(errors.New("cable cut"))), 0))
	if err == nil || err.Error() != "reading k.txt: cable cut" || !slices.Equal(keys, []string{"a"}) {
		t.Errorf("got %q, %v; want a and the read error", keys, err)
	}
}

func TestSynthKeys(t *testing.T) {
	a, _ := drain(newSynthKeys(1000, 1))
	b, _ := drain(newSynthKeys(1000, 1))
	c, _ := drain(newSynthKeys(1000, 2))
	if len(a) != 1000 || !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Fatalf("got %d keys; same seed equal %v, other seed equal %v; want 1000, true, false", len(a), slices.Equal(a, b), slices.Equal(a, c))
	}
	for _, k := range a {
		var x, y, port int
		if _, err := fmt.Sscanf(k, "198.51.%d.%d:%d", &x, &y, &port); err != nil || x > 255 || y > 255 || port < 1024 || port > 65535 {
			t.Fatalf("key %q is not 198.51.a.b:port", k)
		}
	}
}

func TestZipfKeys(t *testing.T) {
	const k, s = 1000, 1.5
	keys, _ := drain(newSynthKeys(k, 3))
	reqs, err := drain(newZipfKeys(k, 3, s))
	if err != nil || len(reqs) != k {
		t.Fatalf("%d requests, %v; want %d", len(reqs), err, k)
	}
	again, _ := drain(newZipfKeys(k, 3, s))
	other, _ := drain(newZipfKeys(k, 4, s))
	if !slices.Equal(reqs, again) || slices.Equal(reqs, other) {
		t.Errorf("same seed equal %v, other seed equal %v; want true, false", slices.Equal(reqs, again), slices.Equal(reqs, other))
	}
	rank := make(map[string]int, k)
	for i, key := range keys {
		rank[key] = i
	}
	count := make([]int, k)
	for _, r := range reqs {
		i, ok := rank[r]
		if !ok {
			t.Fatalf("request for %q, not one of the synthetic keys", r)
		}
		count[i]++
	}
	// The first key draws about 1/H of the requests, within 5 standard
	// deviations, and more than the second, which draws more than the
	// tenth.
	p := 1 / zipfNorm(k, s)
	if sd := math.Sqrt(k * p * (1 - p)); math.Abs(float64(count[0])-k*p) > 5*sd {
		t.Errorf("key 1 drawn %d times, want about %.0f ± %.0f", count[0], k*p, sd)
	}
	if count[0] <= count[1] || count[1] <= count[9] {
		t.Errorf("draws of keys 1, 2, 10: %d, %d, %d; want decreasing", count[0], count[1], count[9])
	}
}

func TestZipfNorm(t *testing.T) {
	// ζ(2) = π²/6; the tail beyond k is about 1/k.
	if got, want := zipfNorm(100000, 2), math.Pi*math.Pi/6-1.0/100000; math.Abs(got-want) > 1e-9 {
		t.Errorf("zipfNorm(1e5, 2) = %v, want %v", got, want)
	}
	if got := zipfNorm(1, 3); got != 1 {
		t.Errorf("zipfNorm(1, 3) = %v, want 1", got)
	}
}

// FuzzReadBackends checks that any input gives either an error naming the
// file or backends with distinct, non-empty names free of white space and
// '#', and that the keys of any input are non-empty and hold no newline.
func FuzzReadBackends(f *testing.F) {
	for _, s := range []string{"", "a\nb 2\n", "a\na\n", "a x\n", "# c\n\n b 0 # d\r\n", "a 1 2", "\xff\x00 3\n", "a\rb\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := readBackends("b.txt", strings.NewReader(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "b.txt") {
				t.Errorf("%q: error %q does not name the file", s, err)
			}
		} else {
			seen := make(map[string]bool)
			for _, b := range l.backends {
				if b.Name == "" || strings.ContainsAny(b.Name, "# \t\n\r") || seen[b.Name] {
					t.Errorf("%q: bad or repeated name %q", s, b.Name)
				}
				seen[b.Name] = true
			}
			if len(l.backends) == 0 {
				t.Errorf("%q: no backends and no error", s)
			}
		}
		keys, err := drain(newLineKeys("k.txt", strings.NewReader(s), int64(len(s))))
		if err != nil {
			t.Errorf("%q: %v", s, err)
		}
		for _, k := range keys {
			if k == "" || strings.Contains(k, "\n") {
				t.Errorf("%q: bad key %q", s, k)
			}
		}
	})
}
