package memcachemaglev_test

// Real memcached servers for the tests: each a memcached process on
// 127.0.0.1 (or on a Unix socket), started by the test and stopped in
// t.Cleanup.

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/maglevlb/maglev/internal/servertest"
)

// startTimeout bounds the wait for a memcached to accept connections,
// generous for slow, loaded machines; it is not a timing assertion.
const startTimeout = 10 * time.Second

// memcachedPath returns the memcached binary, or skips the test (fails it
// where CI=true) when there is none.
func memcachedPath(t testing.TB) string {
	t.Helper()
	return servertest.Binary(t, "memcached", "memcached")
}

// startMemcached starts n memcached servers on free ports of 127.0.0.1,
// stopped when the test ends.
func startMemcached(t testing.TB, n int) []*servertest.Proc {
	t.Helper()
	path := memcachedPath(t)
	servers := make([]*servertest.Proc, n)
	for i := range servers {
		servers[i] = startOne(t, path, "")
	}
	return servers
}

// startMemcachedUnix starts a memcached listening on a Unix socket only,
// stopped when the test ends.
func startMemcachedUnix(t testing.TB) *servertest.Proc {
	t.Helper()
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
	return startOne(t, memcachedPath(t), filepath.Join(dir, "memcached.sock"))
}

// startOne starts one memcached, on the Unix socket sock if it is not
// empty (a path, absolute or relative to the working directory), else on
// a free TCP port, and waits until it accepts connections. A free port is
// found by listening on port 0 and closing; if another process takes it
// meanwhile, memcached exits and startOne tries another.
func startOne(t testing.TB, path, sock string) *servertest.Proc {
	t.Helper()
	var lastErr error
	for range 5 {
		args := []string{"-m", "64", "-t", "1", "-c", "256", "-U", "0"}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses root without it
		}
		addr := sock
		if sock != "" {
			args = append(args, "-s", sock, "-a", "0700")
		} else {
			port, err := servertest.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			args = append(args, "-l", "127.0.0.1", "-p", strconv.Itoa(port))
		}
		m, err := servertest.Start(path, addr, args, startTimeout)
		if err == nil {
			t.Cleanup(m.Stop)
			return m
		}
		lastErr = err
	}
	t.Fatalf("memcached did not start: %v", lastErr)
	return nil
}

// addrs returns the servers' addresses.
func addrs(servers []*servertest.Proc) []string {
	a := make([]string, len(servers))
	for i, s := range servers {
		a[i] = s.Addr
	}
	return a
}
