package memcachemaglev

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev"
)

var (
	// ErrResolve means a server's address could not be resolved: a TCP
	// address without a port or with a bad one, or a host name that does
	// not resolve. The error wraps the net package's error as well.
	ErrResolve = errors.New("memcachemaglev: cannot resolve server address")

	// ErrInvalidConfig is wrapped by the error NewWeighted returns for bad
	// Options: a *ConfigError naming the field. An error about a bad
	// TableSize also wraps maglev.ErrSize.
	ErrInvalidConfig = errors.New("memcachemaglev: invalid config")
)

// A ConfigError reports the Options field that is wrong, and why. Its
// message starts with "memcachemaglev: invalid config: " and names the
// field; errors.Is matches it with ErrInvalidConfig and with its reason.
// (Every package of the project reports a bad config with a ConfigError of
// its own of this shape; see docs/conventions.md.)
type ConfigError struct {
	Field string // the Options field: "TableSize"
	Err   error  // the reason
}

// Error returns "memcachemaglev: invalid config: FIELD: REASON", where a
// reason from package maglev loses its "maglev: " prefix.
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + strings.TrimPrefix(e.Err.Error(), "maglev: ")
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

var _ memcache.ServerSelector = (*Selector)(nil)

// A Server is a memcached server with its weight, for NewWeighted and
// SetWeighted.
type Server struct {
	// Addr is the server's address, as SetServers takes it: a TCP
	// "host:port", or the path of a Unix socket if it contains a "/". It is
	// the server's name in the Maglev table.
	Addr string

	// Weight is the server's share of the keys, relative to the others':
	// a server of weight 2 owns twice the slots of one of weight 1, and
	// scaling every weight by the same factor changes nothing. Weight 0
	// drains the server: it stays known (the table lists it with no slots,
	// Each visits it) but no key goes to it.
	Weight uint32
}

// Options are the parameters of a Selector's tables, fixed when the
// Selector is made: SetServers and SetWeighted build every table with
// them. The zero Options are those of New and of the zero Selector.
// Clients that must send each key to the same server need the same
// Options as well as the same servers and weights.
type Options struct {
	// TableSize is the table's size M, a prime no larger than
	// maglev.MaxSize; 0 means maglev.DefaultSize (65,537). A server owns
	// its weight's share of the M slots within about 2 slots, so a larger
	// M follows the weights more closely, for a larger table (2 bytes a
	// slot) and a slower SetServers (O(M log M)).
	TableSize int

	// Seed seeds the XXH3 hash of server names and keys: the tables hash
	// with maglev.XXH3Seed(Seed). 0 means maglev.XXH3, the default. A
	// fleet sharing a secret seed gets tables that outsiders who know the
	// server names cannot compute.
	Seed uint64
}

// Selector is a memcache.ServerSelector that sends each key to its owner in
// the Maglev table of the servers: a client built with
// memcache.NewFromSelector(s) stores and reads every key on that server.
//
// The zero value is a Selector with no servers and the zero Options. A
// Selector is safe for concurrent use by multiple goroutines: PickServer
// and Each read an immutable state that SetServers and SetWeighted replace
// whole, so lookups take no lock and see either the old servers or the new
// ones.
type Selector struct {
	size  int                   // M, checked; 0 means maglev.DefaultSize (the zero Selector)
	seed  uint64                // the XXH3 seed
	state atomic.Pointer[state] // nil: no servers
}

// state is one set of servers: the table and, for each of its backends in
// table order, the resolved address.
type state struct {
	table *maglev.Table
	addrs []net.Addr
}

// New returns a Selector over the given servers, with the zero Options;
// see SetServers for what the servers may be, how a server listed more
// than once is weighted, and the errors.
func New(servers ...string) (*Selector, error) {
	s := new(Selector)
	if err := s.SetServers(servers...); err != nil {
		return nil, err
	}
	return s, nil
}

// NewWeighted returns a Selector over weighted servers whose tables have
// the size and seed of opts, for these servers and for every later
// SetServers and SetWeighted. See SetWeighted for the servers and the
// errors; for a bad opts.TableSize, before anything else is checked,
// NewWeighted returns a *ConfigError, which errors.Is matches with
// ErrInvalidConfig and with maglev.ErrSize. For a list in gomemcache's convention, where a repeat adds
// weight, pass Weigh(list...).
//
// NewWeighted costs what SetWeighted does.
func NewWeighted(servers []Server, opts Options) (*Selector, error) {
	size := opts.TableSize
	if size == 0 {
		size = maglev.DefaultSize
	}
	if err := maglev.CheckSize(size); err != nil {
		return nil, &ConfigError{Field: "TableSize", Err: err}
	}
	s := &Selector{size: size, seed: opts.Seed}
	if err := s.SetWeighted(servers); err != nil {
		return nil, err
	}
	return s, nil
}

// Weigh returns the weighted servers that a list in gomemcache's
// convention stands for, where a server listed k times has weight k (as
// memcache.ServerList weighs it): each distinct string of servers once,
// in the order of its first appearance, with the number of times it
// appears, anywhere in the list, as its weight. Strings are compared
// exactly, before any resolution. Weigh("a:11211", "b:11211", "a:11211")
// is [{a:11211 2} {b:11211 1}]; Weigh() is empty. Weigh checks nothing
// else. It is O(n) and allocates the result.
func Weigh(servers ...string) []Server {
	out := make([]Server, 0, len(servers))
	at := make(map[string]int, len(servers)) // index in out
	for _, addr := range servers {
		if i, ok := at[addr]; ok {
			out[i].Weight++
			continue
		}
		at[addr] = len(out)
		out = append(out, Server{Addr: addr, Weight: 1})
	}
	return out
}

// SetServers replaces the Selector's servers with a list in gomemcache's
// convention. Each is a TCP address ("10.0.0.1:11211",
// "cache-1.internal:11211", "[::1]:11211") or, if it contains a "/", the
// path of a Unix socket ("/var/run/memcached.sock"), resolved as
// memcache.ServerList resolves them: once, here, with no attempt to
// connect.
//
// A server listed more than once weighs more, as with memcache.ServerList:
// each distinct string is one server of the table, whose weight is the
// number of times it is listed, wherever it is (see Weigh), so
// SetServers("a:11211", "a:11211", "b:11211") gives a:11211 twice the
// keys of b:11211. Strings are compared exactly: "localhost:11211" and
// "127.0.0.1:11211" are two servers of the table, with the same address.
// Since weights are shares, listing every server twice is listing each
// once. The table is maglev.NewWeighted of those servers and weights,
// with the Selector's Options (for New and the zero Selector,
// maglev.DefaultSize slots and maglev.XXH3); without repeats it is
// maglev.New(servers, M, hasher), slot for slot. It depends only on the
// set of distinct strings and their counts, so every client with the same
// list sends a key to the same server, whatever the list's order.
//
// An empty list is valid and removes every server: PickServer then returns
// memcache.ErrNoServers, as with a memcache.ServerList.
//
// On bad input SetServers returns an error and leaves the servers as they
// were. The error's text starts with "memcachemaglev: ", and errors.Is
// matches maglev.ErrEmptyName for an empty string,
// maglev.ErrTooManyBackends for more distinct servers than table slots,
// and ErrResolve for an address that does not resolve.
//
// SetServers resolves each address (a DNS query for a host name) and
// builds a table: O(M log M + n log n), 1 to 2 ms for up to 64 servers at
// M = maglev.DefaultSize, and 128 KiB for that table.
func (s *Selector) SetServers(servers ...string) error {
	return s.set(Weigh(servers...))
}

// SetWeighted replaces the Selector's servers with weighted ones: each
// Addr is resolved as in SetServers, and the table is
// maglev.NewWeighted of the servers, Addr as the name, with the
// Selector's Options. The table depends only on the set of servers with
// their weights, not on their order, so every client with the same
// servers, weights and Options sends a key to the same server. A drained
// server (weight 0) is resolved and visited by Each, so that a client's
// FlushAll and Ping reach it, but PickServer never returns it.
//
// On bad input SetWeighted returns an error and leaves the servers as they
// were. The error's text starts with "memcachemaglev: ", and errors.Is
// matches maglev.ErrNoBackends for an empty list or one whose every
// weight is 0 (to remove every server, call SetServers with none),
// maglev.ErrEmptyName for an empty Addr, maglev.ErrDuplicateName for an
// Addr listed twice (give it the sum of the weights instead),
// maglev.ErrTooManyBackends for more servers than table slots, and
// ErrResolve for an address that does not resolve.
//
// SetWeighted costs what SetServers does; the weights add at most
// O(M log n) to the build.
func (s *Selector) SetWeighted(servers []Server) error {
	if len(servers) == 0 {
		return fmt.Errorf("memcachemaglev: no servers: %w", maglev.ErrNoBackends)
	}
	if !slices.ContainsFunc(servers, func(sv Server) bool { return sv.Weight > 0 }) {
		return fmt.Errorf("memcachemaglev: every server's weight is 0: %w", maglev.ErrNoBackends)
	}
	return s.set(servers)
}

// set builds the table of servers with the Selector's options, resolves
// each server's address, and publishes both.
func (s *Selector) set(servers []Server) error {
	backends := make([]maglev.Backend, len(servers))
	for i, sv := range servers {
		backends[i] = maglev.Backend{Name: sv.Addr, Weight: sv.Weight}
	}
	size := s.size
	if size == 0 {
		size = maglev.DefaultSize
	}
	// The table first: it checks the names (empty, duplicate, too many)
	// before any address is resolved.
	t, err := maglev.NewWeighted(backends, size, maglev.XXH3Seed(s.seed))
	if err != nil {
		return fmt.Errorf("memcachemaglev: %w", err)
	}
	addrs := make([]net.Addr, t.NumBackends())
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
// there. It visits drained servers too, and a server listed more than once
// in SetServers once (memcache.ServerList visits it once per listing), so
// that a client's FlushAll and Ping reach every server once. It sees one
// set of servers even if SetServers or SetWeighted runs meanwhile. Each
// takes no lock and does not allocate.
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
// distinct server strings as given to SetServers (or the Addrs given to
// SetWeighted), its Weights theirs, and its Size and Hasher those of the
// Selector's Options. It is nil for a Selector that never had servers
// set. Comparing the tables before and after SetServers with Diff or
// Changes tells which keys moved. Table is O(1).
func (s *Selector) Table() *maglev.Table {
	st := s.state.Load()
	if st == nil {
		return nil
	}
	return st.table
}
