package servertest

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests start this test binary as the server: with SERVERTEST_LISTEN
// it listens there until killed, with SERVERTEST_EXIT it prints the value
// and exits, and with SERVERTEST_SLEEP it runs without listening.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("SERVERTEST_LISTEN") != "":
		l, err := net.Listen("tcp", os.Getenv("SERVERTEST_LISTEN"))
		if err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(2)
			}
			_ = c.Close()
		}
	case os.Getenv("SERVERTEST_EXIT") != "":
		fmt.Println(os.Getenv("SERVERTEST_EXIT"))
		os.Exit(3)
	case os.Getenv("SERVERTEST_SLEEP") != "":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// TestStartStop checks that Start returns once the server accepts
// connections, and that Stop ends it (twice is fine).
func TestStartStop(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("SERVERTEST_LISTEN", addr)
	p, err := Start(os.Args[0], addr, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr != addr {
		t.Errorf("Addr = %q, want %q", p.Addr, addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("Start returned, but %s accepts nothing: %v", addr, err)
	}
	_ = c.Close()
	p.Stop()
	select {
	case <-p.done:
	default:
		t.Fatal("Stop returned before the process exited")
	}
	p.Stop()
}

// TestStartExited checks that a server that exits before accepting is an
// error carrying its output.
func TestStartExited(t *testing.T) {
	t.Setenv("SERVERTEST_EXIT", "port already taken")
	_, err := Start(os.Args[0], freeAddr(t), []string{"-flag"}, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "port already taken") {
		t.Fatalf("Start of an exiting server: %v, want an error with its output", err)
	}
}

// TestStartTimeout checks that a server that never accepts is an error
// once the timeout passes, and is stopped.
func TestStartTimeout(t *testing.T) {
	t.Setenv("SERVERTEST_SLEEP", "1")
	addr := freeAddr(t)
	_, err := Start(os.Args[0], addr, nil, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not accept connections") {
		t.Fatalf("Start of a silent server: %v, want a timeout error", err)
	}
}

// fakeTB records Skip and Fatal instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Skip(args ...any)      { f.skipped = fmt.Sprint(args...) }
func (f *fakeTB) Fatal(args ...any)     { f.fatal = fmt.Sprint(args...) }
func (f *fakeTB) Errorf(string, ...any) {}

// TestBinary checks the rule for a missing server binary: skip, naming
// the package, and fail instead under CI=true.
func TestBinary(t *testing.T) {
	if path := Binary(t, "sh", "dash"); path == "" {
		t.Fatal("Binary(sh) is empty")
	}
	const name = "no-such-server-binary"
	t.Setenv("CI", "")
	f := &fakeTB{TB: t}
	Binary(f, name, "the-package")
	if !strings.Contains(f.skipped, "apt-get install the-package") || f.fatal != "" {
		t.Errorf("outside CI: skipped %q, fatal %q; want a skip naming the package", f.skipped, f.fatal)
	}
	t.Setenv("CI", "true")
	f = &fakeTB{TB: t}
	Binary(f, name, "the-package")
	if !strings.Contains(f.fatal, "apt-get install the-package") || f.skipped != "" {
		t.Errorf("under CI=true: skipped %q, fatal %q; want a failure naming the package", f.skipped, f.fatal)
	}
}

// TestLog checks that concurrent writes all land, whole.
func TestLog(t *testing.T) {
	var l Log
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if _, err := fmt.Fprintf(&l, "g%d line %d\n", g, i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(l.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, line := range lines {
		var g, i int
		if _, err := fmt.Sscanf(line, "g%d line %d", &g, &i); err != nil {
			t.Fatalf("torn line %q: %v", line, err)
		}
	}
}
