// Package servertest holds what the repository's integration tests share:
// a real server binary run as a child process on loopback, found (or the
// test skipped) by the project's rule, and a log that goroutines write to
// at once. It is for tests only.
package servertest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pollInterval is how often Start tries to connect while it waits.
const pollInterval = 5 * time.Millisecond

// Binary returns the path of the server binary name, which the Debian
// package pkg installs. When there is none it skips the test, naming the
// package to install; under CI=true, where every integration test must
// run, it fails the test instead.
func Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("%s is not installed: install the Debian package %s (apt-get install %s)", name, pkg, pkg)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		} else {
			t.Skip(msg)
		}
	}
	return path
}

// A Proc is one server process that Start started.
type Proc struct {
	Addr string // where it accepts connections: "host:port", or a Unix socket's path

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Start runs the binary at path with args and waits until addr (a TCP
// "host:port", or a Unix socket's path: any address with a slash, as
// gomemcache tells them apart) accepts a connection. It
// returns an error, with the server's output, if the process exits first
// (a port taken meanwhile, say), and an error if addr accepts nothing
// within timeout, after stopping the process.
func Start(path, addr string, args []string, timeout time.Duration) (*Proc, error) {
	cmd := exec.Command(path, args...)
	out := new(bytes.Buffer) // read only once the process has exited
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a killed server's exit status is expected
		close(p.done)
	}()
	network := "tcp"
	if strings.Contains(addr, "/") {
		network = "unix"
	}
	name := filepath.Base(path)
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s %v exited: %v: %s", name, args, cmd.ProcessState, out)
		default:
		}
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			_ = c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, errors.New(name + " on " + addr + " did not accept connections")
		}
		time.Sleep(pollInterval)
	}
}

// Stop kills the process, if it is still running, and waits for it to
// exit.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill() // fails only if the process has just exited
	<-p.done
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller does: a server started on
// it then exits, and Start says so.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// A Log is a log destination that goroutines may write to at once: a
// bytes.Buffer behind a mutex. The zero Log is empty and ready to use.
type Log struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

// Write appends p to the log.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
