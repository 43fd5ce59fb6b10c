package redismaglev_test

// Real Redis servers for the tests: each a redis-server process on
// 127.0.0.1, started by the test and stopped in t.Cleanup.

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/maglevlb/maglev/internal/servertest"
)

// Bounds of the tests' waits, generous for slow, loaded machines; none is
// a timing assertion.
const (
	startTimeout  = 10 * time.Second // a redis-server accepting connections
	settleTimeout = 15 * time.Second // a Ring noticing a shard down or up
	pollInterval  = 5 * time.Millisecond
)

// redisPath returns the redis-server binary, or skips the test (fails it
// where CI=true) when there is none.
func redisPath(t testing.TB) string {
	t.Helper()
	return servertest.Binary(t, "redis-server", "redis-server")
}

// startRedis starts n redis-servers on free ports of 127.0.0.1, stopped
// when the test ends.
func startRedis(t testing.TB, n int) []*servertest.Proc {
	t.Helper()
	path := redisPath(t)
	servers := make([]*servertest.Proc, n)
	for i := range servers {
		servers[i] = startOne(t, path, 0)
	}
	return servers
}

// startOne starts one redis-server, on port if it is not 0, else on a free
// port, and waits until it accepts connections. A free port is found by
// listening on port 0 and closing; if another process takes it meanwhile,
// redis-server exits and startOne tries another.
func startOne(t testing.TB, path string, port int) *servertest.Proc {
	t.Helper()
	var lastErr error
	for range 5 {
		p := port
		if p == 0 {
			var err error
			if p, err = servertest.FreePort(); err != nil {
				t.Fatal(err)
			}
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		args := []string{
			"--port", strconv.Itoa(p), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
			"--daemonize", "no", "--loglevel", "warning",
		}
		s, err := servertest.Start(path, addr, args, startTimeout)
		if err == nil {
			t.Cleanup(s.Stop)
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
