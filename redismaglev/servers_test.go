package redismaglev_test

// Real Redis servers for the tests: each a redis-server process on
// 127.0.0.1, started by the test and stopped in t.Cleanup.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Bounds of the tests' waits, generous for slow, loaded machines; none is
// a timing assertion.
const (
	startTimeout  = 10 * time.Second // a redis-server accepting connections
	settleTimeout = 15 * time.Second // a Ring noticing a shard down or up
	pollInterval  = 5 * time.Millisecond
)

// redisServer is one redis-server process.
type redisServer struct {
	addr string        // "127.0.0.1:port"
	cmd  *exec.Cmd     // the process
	done chan struct{} // closed when the process has exited
}

// redisPath returns the redis-server binary, or skips the test (fails it
// where CI=true) when there is none.
func redisPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not installed: install the Debian package redis-server (apt-get install redis-server)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// startRedis starts n redis-servers on free ports of 127.0.0.1, stopped
// when the test ends.
func startRedis(t testing.TB, n int) []*redisServer {
	t.Helper()
	path := redisPath(t)
	servers := make([]*redisServer, n)
	for i := range servers {
		servers[i] = startOne(t, path, 0)
	}
	return servers
}

// startOne starts one redis-server, on port if it is not 0, else on a free
// port, and waits until it accepts connections. A free port is found by
// listening on port 0 and closing; if another process takes it meanwhile,
// redis-server exits and startOne tries another.
func startOne(t testing.TB, path string, port int) *redisServer {
	t.Helper()
	var lastErr error
	for range 5 {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(); err != nil {
				t.Fatal(err)
			}
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		args := []string{
			"--port", strconv.Itoa(p), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
			"--daemonize", "no", "--loglevel", "warning",
		}
		s, err := launch(path, addr, args)
		if err == nil {
			t.Cleanup(s.stop)
			return s
		}
		lastErr = err
		if port != 0 {
			break
		}
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// launch runs redis-server with args and waits for addr to accept a
// connection.
func launch(path, addr string, args []string) (*redisServer, error) {
	cmd := exec.Command(path, args...)
	out := new(bytes.Buffer) // read only once the process has exited
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a killed server's exit status is expected
		close(s.done)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server %v exited: %v: %s", args, cmd.ProcessState, out)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("redis-server on " + addr + " did not accept connections")
		}
		time.Sleep(pollInterval)
	}
}

// stop kills the server, if it is still running, and waits for it to exit.
func (s *redisServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill() // fails only if the process has just exited
	<-s.done
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

// portOf returns the port of a "host:port" address.
func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
