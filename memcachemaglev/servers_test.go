package memcachemaglev_test

// Real memcached servers for the tests: each a memcached process on
// 127.0.0.1 (or on a Unix socket), started by the test and stopped in
// t.Cleanup.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Bounds of the tests' waits, generous for slow, loaded machines; none is
// a timing assertion.
const (
	startTimeout = 10 * time.Second // a memcached accepting connections
	pollInterval = 5 * time.Millisecond
)

// memcached is one memcached process.
type memcached struct {
	addr string        // "127.0.0.1:port", or the socket's path
	cmd  *exec.Cmd     // the process
	done chan struct{} // closed when the process has exited
}

// memcachedPath returns the memcached binary, or skips the test (fails it
// where CI=true) when there is none.
func memcachedPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("memcached")
	if err != nil {
		msg := "memcached is not installed: install the Debian package memcached (apt-get install memcached)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// startMemcached starts n memcached servers on free ports of 127.0.0.1,
// stopped when the test ends.
func startMemcached(t testing.TB, n int) []*memcached {
	t.Helper()
	path := memcachedPath(t)
	servers := make([]*memcached, n)
	for i := range servers {
		servers[i] = startOne(t, path, false)
	}
	return servers
}

// startMemcachedUnix starts a memcached listening on a Unix socket only,
// stopped when the test ends.
func startMemcachedUnix(t testing.TB) *memcached {
	t.Helper()
	return startOne(t, memcachedPath(t), true)
}

// startOne starts one memcached and waits until it accepts connections. A
// free TCP port is found by listening on port 0 and closing; if another
// process takes it meanwhile, memcached exits and startOne tries another.
func startOne(t testing.TB, path string, unix bool) *memcached {
	t.Helper()
	var lastErr error
	for range 5 {
		args := []string{"-m", "64", "-t", "1", "-c", "256", "-U", "0"}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses root without it
		}
		var addr string
		if unix {
			// A short directory: socket paths are limited to about 100 bytes.
			dir, err := os.MkdirTemp("", "mc")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := os.RemoveAll(dir); err != nil {
					t.Error(err)
				}
			})
			addr = filepath.Join(dir, "memcached.sock")
			args = append(args, "-s", addr, "-a", "0700")
		} else {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			args = append(args, "-l", "127.0.0.1", "-p", strconv.Itoa(port))
		}
		m, err := launch(path, addr, args)
		if err == nil {
			t.Cleanup(m.stop)
			return m
		}
		lastErr = err
	}
	t.Fatalf("memcached did not start: %v", lastErr)
	return nil
}

// launch runs memcached with args and waits for addr to accept a
// connection.
func launch(path, addr string, args []string) (*memcached, error) {
	cmd := exec.Command(path, args...)
	out := new(bytes.Buffer) // read only once the process has exited
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &memcached{addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a killed server's exit status is expected
		close(m.done)
	}()
	network := "tcp"
	if filepath.IsAbs(addr) {
		network = "unix"
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-m.done:
			return nil, fmt.Errorf("memcached %v exited: %v: %s", args, cmd.ProcessState, out)
		default:
		}
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			_ = c.Close()
			return m, nil
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, errors.New("memcached on " + addr + " did not accept connections")
		}
		time.Sleep(pollInterval)
	}
}

// stop kills the server, if it is still running, and waits for it to exit.
func (m *memcached) stop() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Kill() // fails only if the process has just exited
	<-m.done
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// addrs returns the servers' addresses.
func addrs(servers []*memcached) []string {
	a := make([]string, len(servers))
	for i, s := range servers {
		a[i] = s.addr
	}
	return a
}
