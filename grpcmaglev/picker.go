package grpcmaglev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
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

// A picker routes RPCs by key through a Maglev table over every child,
// with those down (in TRANSIENT_FAILURE, or back from it but not READY
// yet) out of service (maglev.Table.Without). The balancer builds a new
// picker on every change of a child's state, and a new table only when the
// children, a weight, the children down or the config change. A picker is immutable but for
// atomic flags, so picks take no lock and share nothing with rebuilds.
//
// A pick is three steps: the key (rpcKey), the owner's table index
// (ownerOf), and the owner's pick (child.pick). With a balanceFactor, the
// index comes from the picker's bounded.Picker instead (pickBounded): the
// channel's counts bound to the picker's own table with Picker.With, so
// that a lease's index is always one of the picker's owners. The
// PickResult's Done releases the lease.
//
// A picker is safe for concurrent use by multiple goroutines.
type picker struct {
	table   *maglev.Table   // over every child's name, those down out of service; never nil
	owners  []*child        // owners[i] is the child the table names Backends()[i]
	ready   []*child        // READY children, for RPCs with no key
	idle    []*child        // IDLE children, asked to connect by keyless picks that find none ready
	waiting bool            // some child is IDLE or CONNECTING
	header  string          // the config's requestHashHeader
	bounded *bounded.Picker // the channel's counts over table; nil when balanceFactor is 0
	failed  *child          // the child that last entered TRANSIENT_FAILURE, or nil
	err     error           // the error when failed is nil and nothing is usable
	metrics *channelMetrics // the channel's; nil records nothing
}

// Pick routes info's RPC. With a key, it goes to the key's owner in the
// table, queueing while the owner connects, or, with a balanceFactor, to
// the first of the key's candidates with room (pickBounded); without a
// key, to a random READY child. With nothing usable it fails with an error
// wrapping ErrNoUsableEndpoint.
//
// Pick is O(1): it hashes the key once and indexes the table (with a
// balanceFactor, O(k) for the k candidates it looks at). It does not
// allocate for a key set with WithKey or for no key. Reading the key from
// the request header costs the copy of its values that grpc's metadata
// package makes (one allocation for one value; more for values appended
// one by one) and, for several values, the join. With a balanceFactor, a
// keyed pick that succeeds also allocates its Done callback (48 bytes).
// Failing picks allocate their error. Each pick is counted in the
// channel's metrics by its outcome, with no allocation (channelMetrics).
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	key, ok := rpcKey(info.Ctx, p.header)
	if !ok {
		res, err := p.pickAny(info)
		p.metrics.pick(outcomeNoKey, err)
		return res, err
	}
	res, err := p.pickKey(info, key)
	p.metrics.pick(outcomeOK, err)
	return res, err
}

// pickKey picks for an RPC whose key is key: its owner's child, or, with a
// balanceFactor, pickBounded's.
func (p *picker) pickKey(info balancer.PickInfo, key string) (balancer.PickResult, error) {
	if p.bounded != nil {
		return p.pickBounded(info, key)
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

// pickBounded picks for key through p.bounded: the first of the key's
// candidates in the table (Table.Candidates order) whose in-flight count
// is below its capacity ceil(factor × L × w_i/Σw), with L the keyed RPCs in
// flight on the channel, this one included. The lease is released by the
// PickResult's Done, or at once if the pick fails or queues.
//
// The chosen child answers as for a pick without a balanceFactor: a READY
// one's picker, and otherwise the pick queues (an IDLE child is asked to
// connect). That holds for a key's owner and for a later candidate alike:
// where a key goes depends only on the table and the counts, never on a
// connection's passing state, and the queued pick is made again, with the
// counts of that moment, when the next picker is published.
//
// p.bounded picks from p.table, even after a rebuild has bound the counts
// to a newer table whose picker is on its way, so the lease's index is
// always one of p's owners. pickBounded is O(k) for the k candidates it
// looks at, takes no lock, and allocates only the Done callback of a pick
// that succeeds.
func (p *picker) pickBounded(info balancer.PickInfo, key string) (balancer.PickResult, error) {
	lease := p.bounded.Acquire(key)
	if lease.Index < 0 { // no usable child; the lease holds nothing
		return p.none(info)
	}
	res, err := p.owners[lease.Index].pick(info)
	if err != nil {
		lease.Release()
		return res, err
	}
	if lease.Spilled {
		p.metrics.spill()
	}
	res.Done = releaseOnDone(lease, res.Done)
	return res, nil
}

// releaseOnDone returns a Done callback that releases l, then calls done if
// it is not nil. gRPC calls a pick's Done exactly once: when the RPC ends,
// or at once if it drops the pick. The callback is one 48-byte allocation,
// a closure holding l, which grpc's API (a func value per pick) forces.
func releaseOnDone(l bounded.Lease, done func(balancer.DoneInfo)) func(balancer.DoneInfo) {
	if done == nil {
		return func(balancer.DoneInfo) { l.Release() }
	}
	return func(di balancer.DoneInfo) {
		l.Release()
		done(di)
	}
}

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

// errPicker fails every pick with err, counting each as failed in metrics
// (nil records nothing). It is immutable and safe for concurrent use.
type errPicker struct {
	err     error
	metrics *channelMetrics
}

// Pick returns the picker's error. It does not allocate.
func (p errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	p.metrics.pick(outcomeOK, p.err)
	return balancer.PickResult{}, p.err
}
