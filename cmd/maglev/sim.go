package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/maglevlb/maglev"
)

const simHelp = `usage: maglev sim [-m size] [-hash xxh3|farm|fnv1a] [-seed n] < script

Sim reads commands from standard input, one per line, and keeps a list of
backends, rebuilding the Maglev table after every change. Fields are
separated by white space; blank lines and lines whose first field starts
with # are ignored.

	ADD_NODE <name> [weight]   add a backend (weight 1 if omitted) and rebuild
	REMOVE_NODE <name>         remove a backend and rebuild
	SET_WEIGHT <name> <weight> change a backend's weight and rebuild
	LOOKUP <key>               print the name of the backend that owns key
	CHURN                      print the number of slots whose owner changed
	                           in the last rebuild (0 before any; a rebuild
	                           from or to no backends changes all M)
	TABLE                      print the owner of every slot, in slot order,
	                           separated by single spaces
	COUNTS                     print "name slots" per backend, sorted by name

Weights are integers from 0 to 4294967295; weight 0 drains a backend: it
stays known (COUNTS lists it with 0 slots) but owns no slots. Backends share
the table in proportion to their weights (maglev.NewWeighted); with equal
weights the table is exactly maglev.New's. ADD_NODE, REMOVE_NODE and
SET_WEIGHT print nothing on success.

A bad line (unknown command, a missing or extra argument, a bad weight,
adding a name twice, removing or reweighting an unknown name, LOOKUP or
TABLE while no backend owns a slot, more backends than slots) writes one
line to standard error:

	error: line 3: unknown command "FOO"

changes nothing, and processing goes on with the next line.

The flags are checked before any input is read: an -m that is not a prime
(or is above maglev.MaxSize), an unknown -hash, or -seed with a hash other
than xxh3 is a startup error, reported as one "error:" line without a line
number; no input is read.

Exit status: 0 if every line succeeded, 1 if any line failed or a flag
value was invalid, 2 for a malformed command line.
`

func runSim(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	m := fs.Int("m", maglev.DefaultSize, "table `size`, a prime")
	hash := fs.String("hash", "xxh3", "hash `function`: xxh3, farm or fnv1a")
	seed := fs.Uint64("seed", 0, "`seed` for -hash xxh3 (0 is unseeded XXH3)")
	if status := parseFlags(fs, args, simHelp, stdout, stderr); status >= 0 {
		return status
	}
	h, err := hasherFor(*hash, *seed)
	if err != nil {
		return reportError(stderr, err)
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	s, err := newSim(*m, h, out)
	if err != nil {
		return reportError(stderr, fmt.Errorf("-m: %v", err))
	}
	failed := s.run(stdin, stderr)
	if err := out.Flush(); err != nil {
		return reportError(stderr, err)
	}
	if failed {
		return 1
	}
	return 0
}

// An op is a sim command.
type op uint8

const (
	opNone op = iota // blank line or comment
	opAdd
	opRemove
	opSetWeight
	opLookup
	opChurn
	opTable
	opCounts
)

var opNames = [...]string{
	opAdd:       "ADD_NODE",
	opRemove:    "REMOVE_NODE",
	opSetWeight: "SET_WEIGHT",
	opLookup:    "LOOKUP",
	opChurn:     "CHURN",
	opTable:     "TABLE",
	opCounts:    "COUNTS",
}

// A command is one parsed line of a sim script.
type command struct {
	op     op
	arg    string // backend name (ADD_NODE, REMOVE_NODE, SET_WEIGHT) or key (LOOKUP)
	weight uint32 // ADD_NODE (1 if not given) and SET_WEIGHT
}

// String returns the command in canonical form, which parseLine parses back
// to the same command: "" for opNone, and ADD_NODE's weight only if it is
// not 1.
func (c command) String() string {
	switch c.op {
	case opNone:
		return ""
	case opAdd:
		if c.weight == 1 {
			return "ADD_NODE " + c.arg
		}
		return "ADD_NODE " + c.arg + " " + strconv.FormatUint(uint64(c.weight), 10)
	case opSetWeight:
		return "SET_WEIGHT " + c.arg + " " + strconv.FormatUint(uint64(c.weight), 10)
	case opRemove, opLookup:
		return opNames[c.op] + " " + c.arg
	}
	return opNames[c.op]
}

// parseLine parses one line of a sim script. Blank lines and comments parse
// to a command with op opNone. The error describes what is wrong with the
// line, without its number. parseLine allocates only for errors.
func parseLine(line string) (command, error) {
	name, rest := cutField(line)
	if name == "" || name[0] == '#' {
		return command{}, nil
	}
	var c command
	switch name {
	case "ADD_NODE":
		c.op = opAdd
	case "REMOVE_NODE":
		c.op = opRemove
	case "SET_WEIGHT":
		c.op = opSetWeight
	case "LOOKUP":
		c.op = opLookup
	case "CHURN":
		c.op = opChurn
	case "TABLE":
		c.op = opTable
	case "COUNTS":
		c.op = opCounts
	default:
		return command{}, fmt.Errorf("unknown command %q", name)
	}
	var args [3]string
	n := 0
	for n < len(args) {
		if args[n], rest = cutField(rest); args[n] == "" {
			break
		}
		n++
	}
	lo, hi := 0, 0 // allowed number of arguments
	switch c.op {
	case opAdd:
		lo, hi = 1, 2
	case opRemove, opLookup:
		lo, hi = 1, 1
	case opSetWeight:
		lo, hi = 2, 2
	}
	switch {
	case n < lo && c.op == opLookup:
		return command{}, fmt.Errorf("%s: missing key", name)
	case n < lo:
		return command{}, fmt.Errorf("%s: missing %s", name, [...]string{"backend name", "weight"}[n])
	case n > hi:
		return command{}, fmt.Errorf("%s: unexpected argument %q", name, args[hi])
	}
	c.arg = args[0]
	if c.op == opAdd {
		c.weight = 1
	}
	if n == 2 {
		w, err := strconv.ParseUint(args[1], 10, 32)
		if err != nil {
			return command{}, fmt.Errorf("%s: bad weight %q: want an integer from 0 to 4294967295", name, args[1])
		}
		c.weight = uint32(w)
	}
	return c, nil
}

// cutField returns the first white-space-separated field of s and the rest
// of s after it. field is "" if s holds only white space.
func cutField(s string) (field, rest string) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// A sim is the state of a sim session: the backends and their weights, the
// table built from them, and the churn of the last rebuild.
type sim struct {
	m       int
	h       maglev.Hasher
	weights map[string]uint32 // backend name to weight
	table   *maglev.Table     // built from weights
	churn   int               // slots changed by the last rebuild
	out     *bufio.Writer     // answers; a write error stays in it until runSim's last Flush reports it
}

// newSim returns a sim with no backends for tables of m slots hashed with h,
// writing answers to out. It fails if m is not a valid table size.
func newSim(m int, h maglev.Hasher, out *bufio.Writer) (*sim, error) {
	t, err := maglev.New(nil, m, h)
	if err != nil {
		return nil, err
	}
	return &sim{m: m, h: h, weights: make(map[string]uint32), table: t, out: out}, nil
}

// maxLine is the longest line run accepts, in bytes.
const maxLine = 1 << 20

// run executes the script read from r, writing answers to s.out and one
// line per failed script line to stderr. It reports whether any line
// failed, including a failure to read r.
func (s *sim) run(r io.Reader, stderr io.Writer) (failed bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for lineno := 1; ; lineno++ {
		line, tooLong, err := readLine(br, &buf)
		switch {
		case tooLong:
			s.fail(stderr, lineno, fmt.Errorf("line longer than %d bytes", maxLine))
			failed = true
		case len(line) == 0 && err == io.EOF:
			return failed
		default:
			if cerr := s.exec(string(bytes.TrimSuffix(line, []byte("\n")))); cerr != nil {
				s.fail(stderr, lineno, cerr)
				failed = true
			}
		}
		if err == io.EOF {
			return failed
		}
		if err != nil {
			s.fail(stderr, lineno, fmt.Errorf("reading input: %v", err))
			return true
		}
	}
}

// readLine reads the next line from br, with its newline if any. A line
// longer than br's buffer is copied into *buf; one longer than maxLine is
// skipped and reported as tooLong. err is nil, io.EOF after the last line,
// or a read error.
func readLine(br *bufio.Reader, buf *[]byte) (line []byte, tooLong bool, err error) {
	line, err = br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, false, err
	}
	*buf = append((*buf)[:0], line...)
	for err == bufio.ErrBufferFull {
		line, err = br.ReadSlice('\n')
		if tooLong = tooLong || len(*buf)+len(line) > maxLine; !tooLong {
			*buf = append(*buf, line...)
		}
	}
	if tooLong {
		return nil, true, err
	}
	return *buf, false, err
}

// fail reports err on line lineno to stderr. Answers written before it are
// flushed first, so that standard output and standard error interleave in
// order when they go to the same place.
func (s *sim) fail(stderr io.Writer, lineno int, err error) {
	_ = s.out.Flush() // a failure stays in s.out, for runSim's last Flush
	warnf(stderr, "error: line %d: %v\n", lineno, err)
}

// exec parses and executes one line.
func (s *sim) exec(line string) error {
	c, err := parseLine(line)
	if err != nil {
		return err
	}
	return s.do(c)
}

// do executes a parsed command.
func (s *sim) do(c command) error {
	switch c.op {
	case opLookup:
		owner := s.table.Lookup(c.arg)
		if owner == "" {
			return s.noOwner("LOOKUP")
		}
		_, _ = s.out.WriteString(owner)
		_ = s.out.WriteByte('\n')
	case opAdd:
		if _, ok := s.weights[c.arg]; ok {
			return fmt.Errorf("ADD_NODE: backend %q already exists", c.arg)
		}
		return s.rebuild("ADD_NODE", c.arg, c.weight, true)
	case opRemove:
		if _, ok := s.weights[c.arg]; !ok {
			return fmt.Errorf("REMOVE_NODE: no backend %q", c.arg)
		}
		return s.rebuild("REMOVE_NODE", c.arg, 0, false)
	case opSetWeight:
		if _, ok := s.weights[c.arg]; !ok {
			return fmt.Errorf("SET_WEIGHT: no backend %q", c.arg)
		}
		return s.rebuild("SET_WEIGHT", c.arg, c.weight, true)
	case opChurn:
		_, _ = s.out.WriteString(strconv.Itoa(s.churn))
		_ = s.out.WriteByte('\n')
	case opTable:
		if s.table.NumBackends() == 0 || s.table.LookupHash(0) == "" {
			return s.noOwner("TABLE")
		}
		for slot := range s.table.Size() {
			if slot > 0 {
				_ = s.out.WriteByte(' ')
			}
			_, _ = s.out.WriteString(s.table.LookupHash(uint64(slot)))
		}
		_ = s.out.WriteByte('\n')
	case opCounts:
		names := s.names()
		counts := s.table.Counts()
		for _, name := range names {
			n := 0
			if i := s.table.Index(name); i >= 0 {
				n = counts[i]
			}
			_, _ = s.out.WriteString(name)
			_ = s.out.WriteByte(' ')
			_, _ = s.out.WriteString(strconv.Itoa(n))
			_ = s.out.WriteByte('\n')
		}
	}
	return nil
}

// noOwner is the error of a command that needs a slot owner when there is
// none.
func (s *sim) noOwner(cmd string) error {
	if len(s.weights) == 0 {
		return fmt.Errorf("%s: no backends", cmd)
	}
	return fmt.Errorf("%s: every backend has weight 0", cmd)
}

// names returns the backend names, sorted.
func (s *sim) names() []string {
	names := make([]string, 0, len(s.weights))
	for name := range s.weights {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// rebuild builds the table for the backends with name set to weight (if
// set) or removed (if not), and makes it current. On error it changes
// nothing.
func (s *sim) rebuild(cmd, name string, weight uint32, set bool) error {
	old, had := s.weights[name]
	if set {
		s.weights[name] = weight
	} else {
		delete(s.weights, name)
	}
	t, err := buildTable(s.weights, s.m, s.h)
	if err != nil {
		if had {
			s.weights[name] = old
		} else {
			delete(s.weights, name)
		}
		return fmt.Errorf("%s: %w", cmd, err)
	}
	s.churn = s.table.Diff(t)
	s.table = t
	return nil
}

// buildTable builds the table of m slots for the backends and their
// weights with maglev.NewWeighted, which with equal weights builds New's
// table.
func buildTable(weights map[string]uint32, m int, h maglev.Hasher) (*maglev.Table, error) {
	backends := make([]maglev.Backend, 0, len(weights))
	for name, w := range weights {
		backends = append(backends, maglev.Backend{Name: name, Weight: w})
	}
	return maglev.NewWeighted(backends, m, h)
}
