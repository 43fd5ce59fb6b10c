package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// compareJSON runs compare with args and -json and decodes its report.
func compareJSON(t *testing.T, args ...string) *report {
	t.Helper()
	stdout, stderr, status := maglevCmd(t, "", append([]string{"compare", "-json"}, args...)...)
	if status != 0 || stderr != "" {
		t.Fatalf("compare %v: status %d, stderr %q", args, status, stderr)
	}
	return decodeReport(t, stdout)
}

// decodeReport decodes the report that compare -json printed.
func decodeReport(t *testing.T, stdout string) *report {
	t.Helper()
	var r report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	return &r
}

// checkSane checks what must hold of any report whatever the timing, with
// the default five rows.
func checkSane(t *testing.T, r *report) {
	t.Helper()
	checkSaneRows(t, r, 5)
}

// checkSaneRows is checkSane for a report of rows rows.
func checkSaneRows(t *testing.T, r *report, rows int) {
	t.Helper()
	if len(r.Rows) != rows {
		t.Fatalf("%d rows, want %d", len(r.Rows), rows)
	}
	for _, res := range r.Rows {
		if (res.Algorithm == "bounded") != (res.Spilled != nil) {
			t.Errorf("%s: spilled %v; want a fraction for a bounded row only", res.Name, res.Spilled)
		}
		if res.Spilled != nil && !(*res.Spilled >= 0 && *res.Spilled <= 1) {
			t.Errorf("%s: spilled %v, want a fraction in [0, 1]", res.Name, *res.Spilled)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{
			{"add moved", res.Add.Moved}, {"add ideal", res.Add.Ideal}, {"add excess", res.Add.Excess},
			{"remove moved", res.Remove.Moved}, {"remove ideal", res.Remove.Ideal}, {"remove excess", res.Remove.Excess},
			{"fail moved", res.Fail.Moved}, {"fail excess", res.Fail.Excess},
		} {
			if !(f.v >= 0 && f.v <= 1) {
				t.Errorf("%s: %s = %v, want a fraction in [0, 1]", res.Name, f.name, f.v)
			}
		}
		if res.Add.Excess > res.Add.Moved || res.Remove.Excess > res.Remove.Moved {
			t.Errorf("%s: excess above moved: add %+v, remove %+v", res.Name, res.Add, res.Remove)
		}
		if !(res.LoadMax >= 1 && res.LoadMin <= 1 && res.LoadMin >= 0 && res.LoadStddev >= 0) {
			t.Errorf("%s: load max/mean %v, min/mean %v, sd/mean %v; want max ≥ 1 ≥ min ≥ 0 and sd ≥ 0",
				res.Name, res.LoadMax, res.LoadMin, res.LoadStddev)
		}
		if res.BuildNs <= 0 || res.LookupNs <= 0 || res.MemoryBytes <= 0 || res.AllocBytes == 0 {
			t.Errorf("%s: build %d ns, lookup %v ns, memory %d, alloc %d; want all positive",
				res.Name, res.BuildNs, res.LookupNs, res.MemoryBytes, res.AllocBytes)
		}
		// A ring only moves keys to a joining backend and from a leaving
		// one.
		if res.Algorithm == "ring" && (res.Add.Excess != 0 || res.Remove.Excess != 0) {
			t.Errorf("%s: excess add %v, remove %v; want 0 for a ring", res.Name, res.Add.Excess, res.Remove.Excess)
		}
		// A failure moves only the failed backend's keys: Maglev rows by
		// Table.Without, rings by the removal. Its ideal is the removal's.
		if res.Fail.Ideal != res.Remove.Ideal || (res.Algorithm != "bounded" && res.Fail.Excess != 0) {
			t.Errorf("%s: fail %+v; want remove's ideal %v and no excess", res.Name, res.Fail, res.Remove.Ideal)
		}
		if res.Algorithm == "ring" && res.Fail != res.Remove {
			t.Errorf("%s: fail %+v, remove %+v; want the same for a ring", res.Name, res.Fail, res.Remove)
		}
		if res.Algorithm == "maglev" && res.Remove.Excess > 0 && res.Fail.Moved >= res.Remove.Moved {
			t.Errorf("%s: fail moved %v, remove moved %v; want fewer keys moved by a failure", res.Name, res.Fail.Moved, res.Remove.Moved)
		}
	}
}

func TestCompareJSON(t *testing.T) {
	r := compareJSON(t, "-k", "20000", "-n", "20")
	checkSane(t, r)
	wantNames := []string{"maglev M=65537", "maglev M=655373", "ring vnodes=5", "ring vnodes=100", "ring vnodes=1000"}
	for i, res := range r.Rows {
		if res.Name != wantNames[i] {
			t.Errorf("row %d is %q, want %q", i, res.Name, wantNames[i])
		}
		if res.Add.Ideal != 1.0/21 || res.Remove.Ideal != 1.0/20 {
			t.Errorf("%s: ideal add %v, remove %v; want exactly 1/21 and 1/20", res.Name, res.Add.Ideal, res.Remove.Ideal)
		}
	}
	if r.N != 20 || r.K != 20000 || r.NoiseFloor != math.Sqrt(20.0/20000) {
		t.Errorf("n %d, k %d, noise floor %v; want 20, 20000, √(20/20000)", r.N, r.K, r.NoiseFloor)
	}
	if r.Added != "10.0.0.21:80" || r.Removed != "10.0.0.1:80" {
		t.Errorf("added %q, removed %q; want 10.0.0.21:80 and 10.0.0.1:80", r.Added, r.Removed)
	}
	// Maglev's slot counts differ by at most one, so its load spread is
	// sampling noise: within a few noise floors of 0.
	for _, res := range r.Rows[:2] {
		if res.LoadStddev > 2*r.NoiseFloor {
			t.Errorf("%s: sd/mean %v, want at most twice the noise floor %v", res.Name, res.LoadStddev, r.NoiseFloor)
		}
	}
	// The seed's five vnodes spread load far beyond the noise.
	if res := r.Rows[2]; res.LoadStddev < 5*r.NoiseFloor {
		t.Errorf("%s: sd/mean %v, want well above the noise floor %v", res.Name, res.LoadStddev, r.NoiseFloor)
	}

	// Everything but timing and memory is deterministic.
	again := compareJSON(t, "-k", "20000", "-n", "20")
	for i := range r.Rows {
		a, b := r.Rows[i], again.Rows[i]
		if a.LoadMax != b.LoadMax || a.LoadMin != b.LoadMin || a.LoadStddev != b.LoadStddev || a.Add != b.Add || a.Remove != b.Remove {
			t.Errorf("%s: two runs differ: %+v and %+v", a.Name, a, b)
		}
	}
}

func TestCompareWeighted(t *testing.T) {
	r := compareJSON(t, "-k", "20000", "-n", "20", "-weights", "1,2,3", "-vnodes", "5,100,300")
	checkSane(t, r)
	// Backends 0..19 weigh 1,2,3,1,2,3,...: 7·1 + 7·2 + 6·3 = 39. Backend
	// 20 joins with weight 3; backend 0 (weight 1) leaves.
	for _, res := range r.Rows {
		if res.Add.Ideal != 3.0/42 || res.Remove.Ideal != 1.0/39 {
			t.Errorf("%s: ideal add %v, remove %v; want 3/42 and 1/39", res.Name, res.Add.Ideal, res.Remove.Ideal)
		}
	}
	// A drained backend takes no keys and is left out of the load figures.
	r = compareJSON(t, "-k", "20000", "-n", "20", "-weights", "0,1", "-vnodes", "5,100,300")
	checkSane(t, r)
	for _, res := range r.Rows {
		if res.Remove.Ideal != 0 || res.Remove.Moved-res.Remove.Excess != 0 {
			t.Errorf("%s: removing a drained backend: %+v, want ideal 0 and only excess moves", res.Name, res.Remove)
		}
	}
}

func TestCompareText(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "load.svg")
	stdout, stderr, status := maglevCmd(t, "", "compare", "-k", "20000", "-n", "20", "-hash", "farm", "-svg", svg)
	if status != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", status, stderr)
	}
	r := compareJSON(t, "-k", "20000", "-n", "20", "-hash", "farm")
	lines := strings.Split(stdout, "\n")
	if !strings.HasPrefix(lines[0], "N=20 backends, K=20,000 keys, hash farm;") {
		t.Errorf("first line %q", lines[0])
	}
	for _, want := range []string{
		"load/mean", "add 10.0.0.21:80", "remove 10.0.0.1:80",
		"algorithm", "build", "memory", "lookup", "max", "min", "sd", "moved", "ideal", "excess",
		"√(N/K) = 0.032",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// Without -inflight or -balance-factor there is no bounded row.
	for _, unwanted := range []string{"spilled", "bounded", "NewBounded"} {
		if strings.Contains(stdout, unwanted) {
			t.Errorf("output without -inflight or -balance-factor has %q:\n%s", unwanted, stdout)
		}
	}
	// Each row shows the JSON's deterministic numbers, and the rows are
	// aligned: every row as long as the header.
	header := lines[3]
	for i, res := range r.Rows {
		line := lines[4+i]
		f := strings.Fields(line)
		if utf8.RuneCountInString(line) != utf8.RuneCountInString(header) || strings.Join(f[:2], " ") != res.Name {
			t.Errorf("row %d = %q, want %q aligned under %q", i, line, res.Name, header)
			continue
		}
		tail := strings.Join(f[len(f)-11:], " ")
		want := strings.Join([]string{
			fmtF(res.LoadMax), fmtF(res.LoadMin), fmtF(res.LoadStddev),
			percent(res.Add.Moved), percent(res.Add.Ideal), percent(res.Add.Excess),
			percent(res.Remove.Moved), percent(res.Remove.Ideal), percent(res.Remove.Excess),
			percent(res.Fail.Moved), percent(res.Fail.Excess),
		}, " ")
		if tail != want {
			t.Errorf("%s: row ends %q, want %q", res.Name, tail, want)
		}
	}

	// The chart is well-formed XML with one bar per backend per row.
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(data)))
	rects := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if want := 1 + 5*20; rects != want { // the background and the bars
		t.Errorf("chart has %d rects, want %d", rects, want)
	}
}

func fmtF(f float64) string {
	b, _ := json.Marshal(math.Round(f*1000) / 1000)
	s := string(b)
	if !strings.Contains(s, ".") {
		s += "."
	}
	for len(s)-strings.Index(s, ".") < 4 {
		s += "0"
	}
	return s
}

func TestCompareErrors(t *testing.T) {
	// 2^62 vnodes times the weight 2 would overflow; where int has 32 bits
	// (GOARCH=386), 2^62 is no int at all.
	hugeVnodes := "error: ring vnodes=4611686018427387904: ring: vnodes out of range: 4611686018427387904, want 1..16777216\n"
	if strconv.IntSize == 32 {
		hugeVnodes = "error: -vnodes \"4611686018427387904\": want positive integers separated by commas\n"
	}
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"-n", "1"}, "error: -n 1: want at least 2 backends\n"},
		{[]string{"-n", "7", "-m", "7"}, "error: -n 7: a table of -m 7 slots holds at most 7 backends, and compare adds one\n"},
		{[]string{"-k", "0"}, "error: -k 0: want at least 1 key\n"},
		{[]string{"-m", "65536"}, "error: -m: maglev: unsupported table size: 65536 is not a prime\n"},
		{[]string{"-hash", "sha1"}, "error: -hash \"sha1\": want xxh3, farm or fnv1a\n"},
		{[]string{"-hash", "fnv1a", "-seed", "3"}, "error: -seed works only with -hash xxh3, not fnv1a\n"},
		{[]string{"-vnodes", "5,0"}, "error: -vnodes \"5,0\": want positive integers separated by commas\n"},
		{[]string{"-weights", "1,x"}, "error: -weights \"1,x\": want integers from 0 to 4294967295 separated by commas\n"},
		{[]string{"-weights", "0"}, "error: -weights \"0\": backends 2 to 100 would all be drained\n"},
		{[]string{"-n", "2", "-weights", "1,0"}, "error: -weights \"1,0\": backends 2 to 2 would all be drained\n"},
		{[]string{"-inflight", "0"}, "error: -inflight 0: want from 1 to 1048576 requests in flight\n"},
		{[]string{"-inflight", "-3"}, "error: -inflight -3: want from 1 to 1048576 requests in flight\n"},
		{[]string{"-inflight", "1048577"}, "error: -inflight 1048577: want from 1 to 1048576 requests in flight\n"},
		{[]string{"-balance-factor", "0.99"}, "error: -balance-factor 0.99: want a finite factor of at least 1\n"},
		{[]string{"-balance-factor", "0"}, "error: -balance-factor 0: want a finite factor of at least 1\n"},
		{[]string{"-balance-factor", "-2", "-inflight", "8"}, "error: -balance-factor -2: want a finite factor of at least 1\n"},
		{[]string{"-balance-factor", "NaN"}, "error: -balance-factor NaN: want a finite factor of at least 1\n"},
		{[]string{"-balance-factor", "Inf"}, "error: -balance-factor +Inf: want a finite factor of at least 1\n"},
		{[]string{"-n", "10", "-vnodes", "2000000"}, "error: ring vnodes=2000000: ring: more than MaxPoints points: 10 backends × 2000000 vnodes\n"},
		{[]string{"-n", "2", "-weights", "4,8", "-vnodes", "4611686018427387904"}, hugeVnodes},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, stderr, status := maglevCmd(t, "", append([]string{"compare", "-k", "100"}, tt.args...)...)
			if stdout != "" || stderr != tt.err || status != 1 {
				t.Errorf("got stdout %q, stderr %q, status %d; want \"\", %q, 1", stdout, stderr, status, tt.err)
			}
		})
	}
}
