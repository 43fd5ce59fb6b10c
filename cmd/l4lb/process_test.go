package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// build returns the path of the command, built once per test binary into
// a directory of its own (the build takes seconds; a test that runs the
// command again needs no other).
func build(t *testing.T) string {
	t.Helper()
	if raceEnabled {
		// The binary is built without -race, so under -race these tests
		// check nothing the plain run (the README's test command, in CI
		// too) has not: they are left to it, which saves the race step
		// about two minutes. The in-process tests (the pool, health,
		// flags) still run under the race detector.
		t.Skip("runs the built l4lb, which -race does not instrument: the plain run covers it")
	}
	if testing.Short() {
		// -short is the check that the module builds and tests alone
		// (release/modules): the README's test command runs these.
		t.Skip("runs the built l4lb in network namespaces: the run without -short covers it")
	}
	bin, err := built()
	if err != nil {
		t.Fatal(err)
	}
	// Its timing is measured: no test of another package that loads the
	// CPUs runs meanwhile.
	xdptest.Shared(t)
	return bin
}

// built builds the command once, into binDir.
var built = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "l4lb")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
})

// binDir holds the built command; TestMain makes it, readable by every
// user (TestLabUnprivileged runs it as nobody), and removes it.
var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "l4lb-test"); err == nil {
		err = os.Chmod(binDir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "l4lb tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// A process is the command running in a namespace (see start).
type process struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan nstest.Record // its log records (see record); closed at its end
	exited chan struct{}      // closed once it has exited, with err set
	err    error              // Wait's
	stderr bytes.Buffer       // its standard error, whole; read once exited is closed
	stdout bytes.Buffer       // its standard output; read once exited is closed
}

// start runs bin with args in namespace ns. Its log records, on its
// standard error, are its lines (next, await, rest). At the end of the
// test it is killed if still running, and its standard error logged if
// the test failed.
func start(t *testing.T, ns, bin string, args ...string) *process {
	t.Helper()
	p := &process{t: t, cmd: exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...),
		lines: make(chan nstest.Record, 16), exited: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = &p.stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			p.stderr.WriteString(s.Text() + "\n")
			p.lines <- record(s.Text())
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // already gone, normally
		go func() {
			for range p.lines { // unblock the reader, if the test stopped reading
			}
		}()
		<-p.exited
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("l4lb's standard error:\n%s", p.stderr.String())
		}
	})
	return p
}

// record returns the record of a line of l4lb's standard error, in
// slog's text or JSON format (nstest.ParseRecord); any other line (a
// panic's) as the message of a record of no level.
func record(l string) nstest.Record {
	if r, ok := nstest.ParseRecord(l); ok {
		return r
	}
	return nstest.Record{Msg: l}
}

// logged returns the records of the process's standard error. Call it
// once exited is closed.
func (p *process) logged() []nstest.Record {
	var out []nstest.Record
	for l := range strings.Lines(p.stderr.String()) {
		out = append(out, record(l))
	}
	return out
}

// next returns the process's next log record, failing the test if it
// exits first or logs nothing for 20 s.
func (p *process) next() nstest.Record {
	p.t.Helper()
	select {
	case r, ok := <-p.lines:
		if !ok {
			<-p.exited
			p.t.Fatalf("l4lb exited: %v\n%s", p.err, p.stderr.String())
		}
		return r
	case <-time.After(20 * time.Second):
		p.t.Fatal("l4lb printed nothing for 20 s")
	}
	return nstest.Record{}
}

// await reads records until one's message is msg and its attributes have
// the values of kv, pairs of a key and a value (nstest.Record.Is), and
// returns it, failing the test if none comes within 20 s.
func (p *process) await(msg string, kv ...string) nstest.Record {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r, ok := <-p.lines:
			if !ok {
				<-p.exited
				p.t.Fatalf("l4lb exited before logging %q %q: %v\n%s", msg, kv, p.err, p.stderr.String())
			}
			if r.Is(msg, kv...) {
				return r
			}
		case <-deadline:
			p.t.Fatalf("l4lb did not log %q %q in 20 s", msg, kv)
		}
	}
}

// has reports whether one of rs is msg with the attributes kv
// (nstest.Record.Is).
func has(rs []nstest.Record, msg string, kv ...string) bool {
	return slices.ContainsFunc(rs, func(r nstest.Record) bool { return r.Is(msg, kv...) })
}

// stop sends SIGTERM and returns the records logged after it, failing the
// test unless the process exits cleanly within 20 s.
func (p *process) stop() []nstest.Record {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	return p.rest()
}

// rest returns the records the process logs until it exits, failing the
// test unless it exits cleanly within 20 s.
func (p *process) rest() []nstest.Record {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	var rest []nstest.Record
	for {
		select {
		case l, ok := <-p.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
			select {
			case <-p.exited:
			case <-deadline:
				p.t.Fatal("l4lb still running 20 s after it was told to stop")
			}
			if p.err != nil {
				p.t.Fatalf("l4lb exited: %v\n%s", p.err, p.stderr.String())
			}
			return rest
		case <-deadline:
			p.t.Fatal("l4lb still running 20 s after it was told to stop")
		}
	}
}

// are reports whether rs are, in order, the records of want, each a
// message and the attributes it has (nstest.Record.Is).
func are(rs []nstest.Record, want ...[]string) bool {
	if len(rs) != len(want) {
		return false
	}
	for i, w := range want {
		if !rs[i].Is(w[0], w[1:]...) {
			return false
		}
	}
	return true
}
