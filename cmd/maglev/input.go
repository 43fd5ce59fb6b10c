package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev"
)

// This file is compare's input: the backends (synthetic, or read from a
// file) and the keys of the requests to route (synthetic, Zipf-distributed,
// or streamed from a file).

// backendName returns the name of synthetic backend i, counting from 0.
func backendName(i int) string {
	x := i + 1
	return fmt.Sprintf("10.%d.%d.%d:80", x>>16&255, x>>8&255, x&255)
}

// A backendList is the backends compare measures: the base set, in order,
// and where each name came from.
type backendList struct {
	backends []maglev.Backend
	line     map[string]int // name to its line in the file; 0 for synthetic names
	weighted bool           // a weight was given for some backend
}

// readBackends reads a backends file from r, named name in errors: one
// backend a line, its name and an optional weight separated by white space.
// Everything from a '#' on is a comment; blank lines are ignored.
func readBackends(name string, r io.Reader) (*backendList, error) {
	l := &backendList{line: make(map[string]int)}
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for lineno := 1; ; lineno++ {
		line, tooLong, err := readLine(br, &buf)
		if err != nil && err != io.EOF {
			return nil, readError(name, err)
		}
		if tooLong {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, lineno, maxLine)
		}
		text, _, _ := strings.Cut(string(line), "#")
		if strings.TrimSpace(text) != "" {
			b, hasWeight, perr := parseBackend(text)
			if perr != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, lineno, perr)
			}
			if first, dup := l.line[b.Name]; dup {
				return nil, fmt.Errorf("%s:%d: duplicate name %q (first on line %d)", name, lineno, b.Name, first)
			}
			l.line[b.Name] = lineno
			l.backends = append(l.backends, b)
			l.weighted = l.weighted || hasWeight
		}
		if err == io.EOF {
			break
		}
	}
	if len(l.backends) == 0 {
		return nil, fmt.Errorf("%s: no backends", name)
	}
	return l, nil
}

// parseBackend parses "name [weight]": a name and an optional weight (1 if
// omitted) separated by white space. hasWeight reports whether s gave one.
func parseBackend(s string) (b maglev.Backend, hasWeight bool, err error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 0:
		return b, false, errors.New("empty name")
	case len(f) > 2:
		return b, false, fmt.Errorf("unexpected %q after the weight", f[2])
	}
	b = maglev.Backend{Name: f[0], Weight: 1}
	if len(f) == 2 {
		w, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return b, false, fmt.Errorf("bad weight %q: want an integer from 0 to 4294967295", f[1])
		}
		b.Weight = uint32(w)
	}
	return b, len(f) == 2, nil
}

// readError describes err, met reading the file named name.
func readError(name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err // names the file already
	}
	return fmt.Errorf("reading %s: %v", name, err)
}

// A keyStream yields the keys of the requests compare routes, in order.
type keyStream interface {
	// next returns the next key, valid until the following call, or
	// io.EOF after the last key. Any other error ends the stream and says
	// where the input went wrong.
	next() ([]byte, error)
	// fraction returns how much of the stream has been read, from 0 to 1,
	// or -1 if that is not known.
	fraction() float64
}

// synthKeys are k synthetic client addresses "198.51.a.b:port" drawn from
// a PCG.
type synthKeys struct {
	r       *rand.Rand
	k, done int
	buf     []byte
}

// newSynthKeys returns the k synthetic keys drawn from a PCG seeded with
// seed.
func newSynthKeys(k int, seed uint64) *synthKeys {
	return &synthKeys{r: rand.New(rand.NewPCG(seed, 0)), k: k}
}

func (s *synthKeys) next() ([]byte, error) {
	if s.done == s.k {
		return nil, io.EOF
	}
	s.done++
	b := append(s.buf[:0], "198.51."...)
	b = strconv.AppendUint(b, s.r.Uint64N(256), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, s.r.Uint64N(256), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, 1024+s.r.Uint64N(65536-1024), 10)
	s.buf = b
	return b, nil
}

func (s *synthKeys) fraction() float64 { return float64(s.done) / float64(s.k) }

// zipfKeys are k requests for the k keys of a synthKeys stream, where the
// key generated i-th (from 0) is requested with probability proportional
// to 1/(i+1)^s. The keys are kept in memory; the draws come from a PCG
// stream of their own.
type zipfKeys struct {
	arena   []byte
	ends    []int // key i is arena[ends[i-1]:ends[i]]
	z       *rand.Zipf
	k, done int
}

// newZipfKeys returns k requests for the k synthetic keys of seed, with
// Zipf(s) popularity.
func newZipfKeys(k int, seed uint64, s float64) *zipfKeys {
	z := &zipfKeys{ends: make([]int, k), k: k}
	gen := newSynthKeys(k, seed)
	for i := range z.ends {
		key, _ := gen.next() // never io.EOF before the k-th key
		z.arena = append(z.arena, key...)
		z.ends[i] = len(z.arena)
	}
	z.z = rand.NewZipf(rand.New(rand.NewPCG(seed, 1)), s, 1, uint64(k-1))
	return z
}

func (z *zipfKeys) next() ([]byte, error) {
	if z.done == z.k {
		return nil, io.EOF
	}
	z.done++
	i := int(z.z.Uint64())
	start := 0
	if i > 0 {
		start = z.ends[i-1]
	}
	return z.arena[start:z.ends[i]:z.ends[i]], nil
}

func (z *zipfKeys) fraction() float64 { return float64(z.done) / float64(z.k) }

// lineKeys streams keys from a file, one a line, without holding more than
// one line in memory. A line is a key as it is, without its line ending
// ("\n" or "\r\n"); empty lines are skipped.
type lineKeys struct {
	name string // for errors
	br   *bufio.Reader
	buf  []byte
	line int
	eof  bool
	size int64        // bytes in the file, or 0 if not known
	read *countReader // bytes read so far
}

// A countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// newLineKeys returns a stream of the lines of r, named name in errors.
// size is r's length in bytes, or 0 if not known.
func newLineKeys(name string, r io.Reader, size int64) *lineKeys {
	cr := &countReader{r: r}
	return &lineKeys{name: name, br: bufio.NewReaderSize(cr, 64<<10), size: size, read: cr}
}

func (l *lineKeys) next() ([]byte, error) {
	for !l.eof {
		line, tooLong, err := readLine(l.br, &l.buf)
		l.line++
		switch {
		case err == io.EOF:
			l.eof = true
		case err != nil:
			return nil, readError(l.name, err)
		}
		if tooLong {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", l.name, l.line, maxLine)
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > 0 {
			return line, nil
		}
	}
	return nil, io.EOF
}

func (l *lineKeys) fraction() float64 {
	if l.size <= 0 {
		return -1
	}
	return min(1, float64(l.read.n-int64(l.br.Buffered()))/float64(l.size))
}

// openKeys opens the keys file path, or standard input for "-", as a
// stream. close releases it.
func openKeys(path string, stdin io.Reader) (ks keyStream, close func(), err error) {
	if path == "-" {
		return newLineKeys("stdin", stdin, 0), func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	var size int64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return newLineKeys(path, f, size), func() { _ = f.Close() }, nil
}
