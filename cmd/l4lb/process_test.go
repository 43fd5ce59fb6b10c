package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
	lines  chan string   // its log records, a line at a time (see logLine); closed at its end
	exited chan struct{} // closed once it has exited, with err set
	err    error         // Wait's
	stderr bytes.Buffer  // its standard error, whole; read once exited is closed
	stdout bytes.Buffer  // its standard output; read once exited is closed
}

// start runs bin with args in namespace ns. Its log records, on its
// standard error, are its lines (next, await, rest). At the end of the
// test it is killed if still running, and its standard error logged if
// the test failed.
func start(t *testing.T, ns, bin string, args ...string) *process {
	t.Helper()
	p := &process{t: t, cmd: exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...),
		lines: make(chan string, 16), exited: make(chan struct{})}
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
			p.lines <- logLine(s.Text())
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

// logLine returns the line the tests compare of a line of l4lb's standard
// error: "l4lb: " and the message of a record in slog's text format
// (time=... level=... msg="..." and its attributes), as l4lb printed its
// status lines before it logged them; any other line (a JSON record, a
// panic) as it is.
func logLine(l string) string {
	if !strings.HasPrefix(l, "time=") {
		return l
	}
	_, rest, ok := strings.Cut(l, " msg=")
	if !ok || !strings.Contains(l, " level=") {
		return l
	}
	if strings.HasPrefix(rest, `"`) {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return l
		}
		msg, err := strconv.Unquote(q)
		if err != nil {
			return l
		}
		return "l4lb: " + msg
	}
	msg, _, _ := strings.Cut(rest, " ")
	return "l4lb: " + msg
}

// logged returns the records of the process's standard error in slog's
// text format as logLine makes them, with their levels: "INFO l4lb: ...".
// Call it once exited is closed.
func (p *process) logged() []string {
	var out []string
	for l := range strings.Lines(p.stderr.String()) {
		l = strings.TrimSuffix(l, "\n")
		_, level, _ := strings.Cut(l, " level=")
		level, _, _ = strings.Cut(level, " ")
		out = append(out, level+" "+logLine(l))
	}
	return out
}

// next returns the process's next log record (logLine), failing the test
// if it exits first or logs nothing for 20 s.
func (p *process) next() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.exited
			p.t.Fatalf("l4lb exited: %v\n%s", p.err, p.stderr.String())
		}
		return l
	case <-time.After(20 * time.Second):
		p.t.Fatal("l4lb printed nothing for 20 s")
	}
	return ""
}

// await reads records until one contains s, failing the test if none
// does within 20 s.
func (p *process) await(s string) {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.exited
				p.t.Fatalf("l4lb exited before printing %q: %v\n%s", s, p.err, p.stderr.String())
			}
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			p.t.Fatalf("l4lb did not print %q in 20 s", s)
		}
	}
}

// stop sends SIGTERM and returns the records logged after it, failing the
// test unless the process exits cleanly within 20 s.
func (p *process) stop() []string {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	return p.rest()
}

// rest returns the records the process logs until it exits, failing the
// test unless it exits cleanly within 20 s.
func (p *process) rest() []string {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	var rest []string
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
