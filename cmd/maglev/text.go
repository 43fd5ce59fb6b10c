package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// writeText writes r as an aligned table with notes.
func writeText(w io.Writer, r *report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s; %s %s, %d CPUs\n\n", describe(r), r.Go, r.Platform, r.CPUs)

	var bounded []result // the bounded rows, which add a spilled column
	for _, res := range r.Rows {
		if res.Spilled != nil {
			bounded = append(bounded, res)
		}
	}
	header := []string{"algorithm", "build", "memory", "lookup", "max", "min", "sd", "moved", "ideal", "excess", "moved", "ideal", "excess", "moved", "excess"}
	groups := []group{
		{"load/mean", 4, 6},
		{"add " + r.Added, 7, 9},
		{"remove " + r.Removed, 10, 12},
		{"fail it", 13, 14},
	}
	if bounded != nil {
		header = slices.Insert(header, 7, "spilled")
		for i := range groups[1:] {
			groups[1+i].first++
			groups[1+i].last++
		}
	}
	rows := [][]string{header}
	for _, res := range r.Rows {
		row := []string{
			res.Name,
			duration(res.BuildNs),
			bytesize(res.MemoryBytes),
			fmt.Sprintf("%.1f ns", res.LookupNs),
			fmt.Sprintf("%.3f", res.LoadMax),
			fmt.Sprintf("%.3f", res.LoadMin),
			fmt.Sprintf("%.3f", res.LoadStddev),
			percent(res.Add.Moved), percent(res.Add.Ideal), percent(res.Add.Excess),
			percent(res.Remove.Moved), percent(res.Remove.Ideal), percent(res.Remove.Excess),
			percent(res.Fail.Moved), percent(res.Fail.Excess),
		}
		switch {
		case res.Spilled != nil:
			row = slices.Insert(row, 7, percent(*res.Spilled))
		case bounded != nil:
			row = slices.Insert(row, 7, "-")
		}
		rows = append(rows, row)
	}
	writeTable(&b, groups, rows)

	spread := math.Sqrt(2*math.Log(float64(r.N))) * r.NoiseFloor
	fmt.Fprintf(&b, "\nNoise floor: with K=%s random keys, even a perfectly uniform assignment to N=%d\n", thousands(r.K), r.N)
	fmt.Fprintf(&b, "backends shows sd ≈ √(N/K) = %.3f and max, min about %.3f from 1; moved fractions\n", r.NoiseFloor, spread)
	fmt.Fprintf(&b, "are ±%s. Smaller differences between rows are sampling noise.\n",
		percent(math.Sqrt(1/(float64(r.N)*float64(r.K)))))
	switch {
	case r.Zipf != 0:
		fmt.Fprintf(&b, "Zipf(%v): the most popular key alone draws %s of the requests, %.1f× an equal share\n",
			r.Zipf, percent(r.HotKeyShare), r.HotKeyShare*float64(r.N))
		b.WriteString("(1/N); its backend carries at least that under any consistent hash.\n")
		if bounded != nil {
			b.WriteString("Bounded loads spill it instead: no backend ever holds more than its capacity.\n")
		}
	case r.KeysFile != "":
		b.WriteString("Keys from a file can repeat: a key on many lines is a hot key, which no consistent hash\n")
		b.WriteString("spreads, so loads can lie well beyond this floor.\n")
	}
	for _, res := range bounded {
		writeBoundedNote(&b, res)
	}
	b.WriteString("build: fastest of 3; memory: heap kept by the built value; lookup: Lookup(key) with hashing;\n")
	b.WriteString("load/mean: keys per backend over the fair share; moved: fraction of keys whose backend\n")
	b.WriteString("changes; excess: keys moved between backends that stayed. \"maglev compare -h\" explains.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeBoundedNote writes what the bounded row res is and how its columns
// differ from the others'.
func writeBoundedNote(b *strings.Builder, res result) {
	c := res.InFlight
	fmt.Fprintf(b, "%s: the M=%d table through bounded.New(t, %v), with a sliding\n", res.Name, res.M, res.BalanceFactor)
	fmt.Fprintf(b, "window of %d requests in flight: request i is released just before request i+%d is\n", c, c)
	fmt.Fprintf(b, "placed, so each pick sees L = %d, itself included (i+1 for the first %d). A backend's\n", c, c)
	b.WriteString("capacity is ceil(F·L·w/Σw). lookup: Acquire and Release, hashing included; spilled:\n")
	b.WriteString("requests placed past their key's first candidate; moved: requests that go to another\n")
	b.WriteString("backend than in the same simulation without the change.\n")
}

// describe returns what r compared, as the first line of the text says
// it: the backends, the keys and the hash.
func describe(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "N=%d backends", r.N)
	if r.BackendsFile != "" {
		fmt.Fprintf(&b, " (%s)", r.BackendsFile)
	}
	fmt.Fprintf(&b, ", K=%s keys", thousands(r.K))
	switch {
	case r.KeysFile == "-":
		b.WriteString(" (standard input)")
	case r.KeysFile != "":
		fmt.Fprintf(&b, " (%s)", r.KeysFile)
	case r.Zipf != 0:
		fmt.Fprintf(&b, " Zipf(%v)", r.Zipf)
	}
	fmt.Fprintf(&b, ", hash %s", hasherName(r.Hash, r.Seed))
	switch {
	case r.Weights != nil:
		fmt.Fprintf(&b, ", weights %s", joinUints(r.Weights))
	case r.Weighted:
		b.WriteString(", weighted")
	}
	return b.String()
}

// A group is a label over columns first..last of a table.
type group struct {
	label       string
	first, last int
}

// writeTable writes rows as columns separated by two spaces, the first
// left-aligned and the others right-aligned, under a line of group labels.
func writeTable(b *strings.Builder, groups []group, rows [][]string) {
	const gap = 2
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for c, cell := range row {
			widths[c] = max(widths[c], len([]rune(cell)))
		}
	}
	for _, g := range groups {
		span := -gap
		for c := g.first; c <= g.last; c++ {
			span += widths[c] + gap
		}
		if extra := len([]rune(g.label)) - span; extra > 0 {
			widths[g.last] += extra
		}
	}
	// The group line: each label centred over its columns.
	var line strings.Builder
	col := 0
	for _, g := range groups {
		start, span := 0, -gap
		for c := range g.first {
			start += widths[c] + gap
		}
		for c := g.first; c <= g.last; c++ {
			span += widths[c] + gap
		}
		pad := (span - len([]rune(g.label))) / 2
		line.WriteString(strings.Repeat(" ", start+pad-col))
		line.WriteString(g.label)
		col = start + pad + len([]rune(g.label))
	}
	b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	for _, row := range rows {
		var line strings.Builder
		for c, cell := range row {
			pad := strings.Repeat(" ", widths[c]-len([]rune(cell)))
			if c == 0 {
				line.WriteString(cell + pad)
			} else {
				line.WriteString(strings.Repeat(" ", gap) + pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// percent formats a fraction as a percentage with two decimals.
func percent(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// duration formats ns with three significant digits.
func duration(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// bytesize formats n bytes in KiB or MiB.
func bytesize(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// thousands formats n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// joinUints formats ws separated by commas.
func joinUints(ws []uint32) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = strconv.FormatUint(uint64(w), 10)
	}
	return strings.Join(s, ",")
}
