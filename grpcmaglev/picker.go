package grpcmaglev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/maglevlb/maglev"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
)

// ErrNoUsableEndpoint is wrapped by the error of picks made when every
// endpoint is down, or there are none. That error also wraps the last
// connection (or health-check) error an endpoint reported, or the
// resolver's error. gRPC fails fail-fast RPCs with status Unavailable and
// the error's message, and makes WaitForReady RPCs wait for a usable
// endpoint.
var ErrNoUsableEndpoint = errors.New("grpcmaglev: no usable endpoint")

// errNoEndpoints is the pick error while the resolver has given no
// endpoints.
var errNoEndpoints = fmt.Errorf("%w: the resolver gave no endpoints", ErrNoUsableEndpoint)

// A child is one endpoint's pick_first child as a picker sees it: a
// snapshot of its state taken when the picker was built. Only kicked
// changes afterwards, atomically, so a child is safe for concurrent use.
type child struct {
	name     string
	state    connectivity.State
	picker   balancer.Picker // the child's own; nil until it has reported one
	exitIdle func()          // asks the child to connect, on a goroutine of its own
	kicked   atomic.Bool     // exitIdle was called through this snapshot
}

// pick picks through c for an RPC whose key c owns. A READY child's picker
// answers (pick_first's returns its connection). An IDLE child is asked to
// connect, once per picker and off the pick path, and the pick queues, as
// it does for a CONNECTING child: gRPC retries it, even a fail-fast RPC,
// when the next picker is published. pick allocates nothing itself.
func (c *child) pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if c.state == connectivity.Ready && c.picker != nil {
		return c.picker.Pick(info)
	}
	if c.state == connectivity.Idle {
		c.connect()
	}
	return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
}

// connect calls exitIdle the first time it is called on c.
func (c *child) connect() {
	if c.exitIdle != nil && c.kicked.CompareAndSwap(false, true) {
		c.exitIdle()
	}
}

// A picker routes RPCs by key through a Maglev table over the usable
// children: those not down (in TRANSIENT_FAILURE, or back from it but not
// READY yet). The balancer builds a new picker on every change of a
// child's state, and rebuilds the table only when the set of usable
// children, a weight or the config changes. A picker is immutable but for
// atomic flags, so picks take no lock and share nothing with rebuilds.
//
// A pick is three steps: the key (rpcKey), the owner's table index
// (ownerOf), and the owner's pick (child.pick). The table's backend indices
// are the owners' indices, so a later bounded-load mode can replace ownerOf
// with a chooser that returns an index from the same table and attach its
// release call to the PickResult's Done.
//
// A picker is safe for concurrent use by multiple goroutines.
type picker struct {
	table   *maglev.Table // over the usable children's names; never nil
	owners  []*child      // owners[i] is the child the table names Backends()[i]
	ready   []*child      // READY children, for RPCs with no key
	idle    []*child      // IDLE children, asked to connect by keyless picks that find none ready
	waiting bool          // some child is IDLE or CONNECTING
	header  string        // the config's requestHashHeader
	failed  *child        // the child that last entered TRANSIENT_FAILURE, or nil
	err     error         // the error when failed is nil and nothing is usable
}

// Pick routes info's RPC. With a key, it goes to the key's owner in the
// table, queueing while the owner connects; without one, to a random READY
// child. With nothing usable it fails with an error wrapping
// ErrNoUsableEndpoint.
//
// Pick is O(1): it hashes the key once and indexes the table. It does not
// allocate for a key set with WithKey or for no key. Reading the key from
// the request header costs the copy of its values that grpc's metadata
// package makes (one allocation for one value; more for values appended
// one by one) and, for several values, the join. Failing picks allocate
// their error.
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	key, ok := rpcKey(info.Ctx, p.header)
	if !ok {
		return p.pickAny(info)
	}
	i := p.ownerOf(key)
	if i < 0 {
		return p.none(info)
	}
	return p.owners[i].pick(info)
}

// ownerOf returns the table index of key's owner, or -1 if no child is
// usable. It is O(1) and does not allocate.
func (p *picker) ownerOf(key string) int { return p.table.LookupIndex(key) }

// pickAny picks a random READY child for an RPC with no key, or, with none
// READY, answers as none does.
func (p *picker) pickAny(info balancer.PickInfo) (balancer.PickResult, error) {
	if n := len(p.ready); n > 0 {
		return p.ready[rand.IntN(n)].pick(info)
	}
	return p.none(info)
}

// none answers a pick that found no endpoint to take it: it queues while
// some child is connecting (asking IDLE ones to connect), and fails when
// none is.
func (p *picker) none(info balancer.PickInfo) (balancer.PickResult, error) {
	if p.waiting {
		for _, c := range p.idle {
			c.connect()
		}
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	return p.fail(info)
}

// fail returns the error of a pick with no usable child: ErrNoUsableEndpoint
// wrapping the current error of the child that failed last.
func (p *picker) fail(info balancer.PickInfo) (balancer.PickResult, error) {
	if p.failed == nil || p.failed.picker == nil {
		return balancer.PickResult{}, p.err
	}
	_, err := p.failed.picker.Pick(info) // pick_first in TRANSIENT_FAILURE returns its last error
	if err == nil || errors.Is(err, balancer.ErrNoSubConnAvailable) {
		// The child is leaving TRANSIENT_FAILURE; its next state brings a
		// new picker.
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	return balancer.PickResult{}, fmt.Errorf("%w: last error: %w", ErrNoUsableEndpoint, err)
}

// errPicker fails every pick with err. It is immutable and safe for
// concurrent use.
type errPicker struct{ err error }

// Pick returns the picker's error. It does not allocate.
func (p errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, p.err
}
