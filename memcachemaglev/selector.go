package memcachemaglev

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev"
)

// ErrResolve means a server's address could not be resolved: a TCP address
// without a port or with a bad one, or a host name that does not resolve.
// The error wraps the net package's error as well.
var ErrResolve = errors.New("memcachemaglev: cannot resolve server address")

var _ memcache.ServerSelector = (*Selector)(nil)

// Selector is a memcache.ServerSelector that sends each key to its owner in
// the Maglev table of the servers: a client built with
// memcache.NewFromSelector(s) stores and reads every key on that server.
//
// The zero value is a Selector with no servers. A Selector is safe for
// concurrent use by multiple goroutines: PickServer and Each read an
// immutable state that SetServers replaces whole, so lookups take no lock
// and see either the old servers or the new ones.
type Selector struct {
	state atomic.Pointer[state] // nil: no servers
}

// state is one set of servers: the table and, for each of its backends in
// table order, the resolved address.
type state struct {
	table *maglev.Table
	addrs []net.Addr
}

// New returns a Selector over the given servers; see SetServers for what
// they may be and for the errors.
func New(servers ...string) (*Selector, error) {
	s := new(Selector)
	if err := s.SetServers(servers...); err != nil {
		return nil, err
	}
	return s, nil
}

// SetServers replaces the Selector's servers. Each is a TCP address
// ("10.0.0.1:11211", "cache-1.internal:11211", "[::1]:11211") or, if it
// contains a "/", the path of a Unix socket ("/var/run/memcached.sock"),
// resolved as memcache.ServerList resolves them: once, here, with no
// attempt to connect. The Maglev table is
// maglev.New(servers, maglev.DefaultSize, nil) over the server strings
// exactly as given, so every client with the same list sends a key to the
// same server, whatever the list's order.
//
// An empty list is valid and removes every server: PickServer then returns
// memcache.ErrNoServers, as with a memcache.ServerList.
//
// On bad input SetServers returns an error and leaves the servers as they
// were. The error's text starts with "memcachemaglev: ", and errors.Is
// matches maglev.ErrEmptyName for an empty string, maglev.ErrDuplicateName
// for a server listed twice (unlike memcache.ServerList, a repeat does not
// add weight), maglev.ErrTooManyBackends for more than maglev.DefaultSize
// servers, and ErrResolve for an address that does not resolve.
//
// SetServers resolves each address (a DNS query for a host name) and
// builds a table: O(M log M + n log n) for M = maglev.DefaultSize, 1 to
// 2 ms for up to 64 servers, and 128 KiB for the table.
func (s *Selector) SetServers(servers ...string) error {
	// The table first: it checks the names (empty, duplicate, too many)
	// before any address is resolved.
	t, err := maglev.New(servers, maglev.DefaultSize, nil)
	if err != nil {
		return fmt.Errorf("memcachemaglev: %w", err)
	}
	addrs := make([]net.Addr, t.Len())
	for i := range addrs {
		if addrs[i], err = resolve(t.Backend(i)); err != nil {
			return err
		}
	}
	s.state.Store(&state{table: t, addrs: addrs})
	return nil
}

// resolve resolves one server as memcache.ServerList does, into an address
// whose Network and String return stored strings without allocating.
func resolve(server string) (net.Addr, error) {
	if strings.Contains(server, "/") {
		a, err := net.ResolveUnixAddr("unix", server)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrResolve, server, err)
		}
		return &staticAddr{network: a.Network(), str: a.String()}, nil
	}
	a, err := net.ResolveTCPAddr("tcp", server)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrResolve, server, err)
	}
	return &staticAddr{network: a.Network(), str: a.String()}, nil
}

// staticAddr is a resolved address with its two strings computed once:
// the client calls String on every operation.
type staticAddr struct {
	network, str string
}

func (a *staticAddr) Network() string { return a.network }
func (a *staticAddr) String() string  { return a.str }

// PickServer returns the address of the server that owns key in the
// Maglev table: that of Table().Lookup(key). With no servers it returns
// memcache.ErrNoServers. PickServer is O(1) (one hash of the key and one
// table read), takes no lock, and does not allocate.
func (s *Selector) PickServer(key string) (net.Addr, error) {
	st := s.state.Load()
	if st == nil || len(st.addrs) == 0 {
		return nil, memcache.ErrNoServers
	}
	return st.addrs[st.table.LookupIndex(key)], nil
}

// Each calls f with the address of each server, in the table's order
// (that of Table().Backends()), and returns f's first error, stopping
// there. It sees one set of servers even if SetServers runs meanwhile.
// Each takes no lock and does not allocate.
func (s *Selector) Each(f func(net.Addr) error) error {
	st := s.state.Load()
	if st == nil {
		return nil
	}
	for _, a := range st.addrs {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}

// Table returns the Maglev table PickServer uses: its backends are the
// server strings as given to SetServers. It is nil for a Selector that
// never had servers set. Comparing the tables before and after SetServers
// with Diff or Changes tells which keys moved. Table is O(1).
func (s *Selector) Table() *maglev.Table {
	st := s.state.Load()
	if st == nil {
		return nil
	}
	return st.table
}
