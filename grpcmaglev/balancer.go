package grpcmaglev

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/grpclog"
	_ "google.golang.org/grpc/health" // client-side health checking, when the service config asks for it
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/ringhash"
	"google.golang.org/grpc/serviceconfig"
)

// Name is the policy's name in a service config's loadBalancingConfig.
const Name = "maglev"

// ErrBadResolverUpdate is wrapped by the error a resolver update is
// rejected with: an endpoint with no address, two endpoints with the same
// name, or more endpoints than table slots. The error also wraps
// balancer.ErrBadResolverState, so that gRPC asks the resolver again, and,
// for names and counts, the error maglev.NewWeighted gives them
// (maglev.ErrDuplicateName, maglev.ErrEmptyName,
// maglev.ErrTooManyBackends). The policy keeps using the last good update;
// before there is one, picks fail with the error.
var ErrBadResolverUpdate = errors.New("grpcmaglev: resolver update rejected")

// errNoAddress is the reason for rejecting an endpoint with no address.
var errNoAddress = errors.New("endpoint has no address")

var logger = grpclog.Component("maglev")

func init() { balancer.Register(builder{}) }

// builder builds the policy and parses its config.
type builder struct{}

// Name returns Name.
func (builder) Name() string { return Name }

// ParseConfig parses the policy's JSON config (see the package doc); grpc
// calls it for each service config that chooses the policy. Every error
// wraps ErrInvalidConfig and is a *ConfigError naming the field. It takes
// O(len(js)) time plus O(√tableSize) for the primality check, and
// allocates the parsed config.
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	return parseConfig(js)
}

// Build returns a new policy instance for one channel: an endpointsharding
// balancer with one pick_first child per endpoint, whose picker updates the
// instance turns into Maglev pickers. It allocates the instance; tables
// are built when endpoints arrive. builder is stateless and safe for
// concurrent use.
func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &maglevBalancer{
		ClientConn: cc,
		metrics:    newChannelMetrics(cc.MetricsRecorder(), opts.Target.String()),
		records:    resolver.NewEndpointMap[*record](),
	}
	pf := balancer.Get(pickfirst.Name)
	b.child = endpointsharding.NewBalancer(b, opts, pf.Build, endpointsharding.Options{})
	return b
}

// maglevBalancer is one channel's policy instance. gRPC calls its
// Balancer methods from one goroutine; the children call UpdateState from
// theirs. mu serializes both and guards every field after it; picks never
// take it.
type maglevBalancer struct {
	balancer.ClientConn                   // the channel; UpdateState is intercepted
	child               balancer.Balancer // endpointsharding over pick_first children
	metrics             *channelMetrics   // the channel's; nil (in tests without a channel) records nothing

	mu          sync.Mutex
	cfg         *lbConfig                      // nil until the first good update
	inhibit     bool                           // children's updates wait for the end of UpdateClientConnState
	children    []endpointsharding.ChildState  // as the children last reported
	resolverErr error                          // the last resolver error, until the next good update
	records     *resolver.EndpointMap[*record] // what each endpoint last reported
	gen         uint64                         // counts recordFailuresLocked's calls
	seq         uint64                         // counts TRANSIENT_FAILURE reports
	full        *maglev.Table                  // over members, built with tableCfg
	members     []maglev.Backend               // every endpoint, sorted by name
	down        []string                       // the members that are down, sorted
	table       *maglev.Table                  // full without down (see rebuildTableLocked)
	tableCfg    *lbConfig
	bounded     *bounded.Picker // over table, with the channel's in-flight counts at cfg's balanceFactor: what pickers acquire on; nil when the factor is 0
}

// A record remembers what an endpoint last reported: whether it is down,
// and when it last failed, to find the endpoint that failed last; and its
// weight. Records are guarded by maglevBalancer.mu.
type record struct {
	gen    uint64 // the last recordFailuresLocked call that found the endpoint among the children
	state  connectivity.State
	seq    uint64                 // when it last entered TRANSIENT_FAILURE; 0 if never
	down   bool                   // it reported TRANSIENT_FAILURE and has not been READY since
	attrs  *attributes.Attributes // the endpoint's attributes weight was read from
	weight uint32                 // endpointWeight of the endpoint with attrs
	read   bool                   // weight has been read
}

// UpdateClientConnState takes a new resolver state and config. It rejects
// an update whose endpoints cannot name a table (see ErrBadResolverUpdate)
// and otherwise passes the endpoints, with pick_first's health listener
// enabled, to the children, then publishes one picker.
func (b *maglevBalancer) UpdateClientConnState(ccs balancer.ClientConnState) error {
	cfg, ok := ccs.BalancerConfig.(*lbConfig)
	if !ok {
		return fmt.Errorf("%w: config of type %T (%w)", ErrBadResolverUpdate, ccs.BalancerConfig, balancer.ErrBadResolverState)
	}
	if err := checkEndpoints(ccs.ResolverState.Endpoints, cfg.size); err != nil {
		err = fmt.Errorf("%w: %w (%w)", ErrBadResolverUpdate, err, balancer.ErrBadResolverState)
		logger.Errorf("balancer %p: %v", b, err)
		b.mu.Lock()
		if b.cfg == nil {
			b.ClientConn.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure, Picker: errPicker{err: err, metrics: b.metrics}})
		}
		b.mu.Unlock()
		return err
	}

	b.mu.Lock()
	b.inhibit = true
	b.mu.Unlock()
	err := b.child.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(ccs.ResolverState),
	})
	b.mu.Lock()
	b.cfg = cfg
	b.resolverErr = nil
	b.inhibit = false
	b.publishLocked()
	b.mu.Unlock()
	return err
}

// ResolverError passes a resolver error to the children, which keep their
// endpoints; with none, picks fail with it.
func (b *maglevBalancer) ResolverError(err error) {
	b.mu.Lock()
	b.resolverErr = err
	b.mu.Unlock()
	b.child.ResolverError(err)
}

// UpdateSubConnState is never called: pick_first children listen to their
// own SubConns.
func (b *maglevBalancer) UpdateSubConnState(sc balancer.SubConn, state balancer.SubConnState) {
	logger.Errorf("balancer %p: UpdateSubConnState(%v, %+v) called unexpectedly", b, sc, state)
}

// ExitIdle asks every IDLE child to connect.
func (b *maglevBalancer) ExitIdle() { b.child.ExitIdle() }

// Close closes the children.
func (b *maglevBalancer) Close() { b.child.Close() }

// UpdateState takes the children's states from endpointsharding and
// publishes a new picker for them, unless UpdateClientConnState is under
// way and will publish one itself.
func (b *maglevBalancer) UpdateState(state balancer.State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.children = endpointsharding.ChildStatesFromPicker(state.Picker)
	if !b.inhibit && b.cfg != nil {
		b.publishLocked()
	}
}

// publishLocked rebuilds the table if needed (rebuildLocked) and publishes a
// picker over it. Caller holds b.mu.
func (b *maglevBalancer) publishLocked() {
	if err := b.rebuildLocked(b.recordFailuresLocked()); err != nil {
		// checkEndpoints vetted the names and their number.
		logger.Errorf("balancer %p: %v", b, err)
		b.ClientConn.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure, Picker: errPicker{err: err, metrics: b.metrics}})
		return
	}
	p, state := b.newPickerLocked()
	b.ClientConn.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

// rebuildLocked rebuilds the table if the endpoints, their weights, the
// ones that are down or the config changed, logging how many slots moved,
// and binds the channel's counts to it when balanceFactor is set
// (syncBoundedLocked). It runs here, on the goroutine that reported the
// change, never in a pick. Caller holds b.mu.
func (b *maglevBalancer) rebuildLocked(members []maglev.Backend, down []string) error {
	if err := b.rebuildTableLocked(members, down); err != nil {
		return err
	}
	return b.syncBoundedLocked()
}

// syncBoundedLocked keeps b.bounded, the Bounded pickers acquire on, over
// b.table at the config's balanceFactor: nil when the factor is 0; new
// counts when the factor changes (leases taken before are released into
// the old counts, so L starts again from the RPCs made after the change);
// and otherwise b.bounded.With(b.table) when the table was rebuilt. Every
// Bounded With makes shares the counts, so an endpoint that stays in the
// table keeps its in-flight count across rebuilds and pickers. With is
// O(N) and allocates O(N), once per table, here and not in a pick. Caller
// holds b.mu.
func (b *maglevBalancer) syncBoundedLocked() error {
	switch f := b.cfg.factor; {
	case f == 0:
		b.bounded = nil
	case b.bounded == nil || b.bounded.Factor() != f:
		nb, err := bounded.New(b.table, f)
		if err != nil { // parseConfig vetted f
			return fmt.Errorf("grpcmaglev: balanceFactor: %w", err)
		}
		b.bounded = nb
	case b.bounded.Table() != b.table:
		b.bounded = b.bounded.With(b.table)
	}
	return nil
}

// rebuildTableLocked is rebuildLocked's table half, over the endpoints and
// the names of those down that recordFailuresLocked returned. Caller holds
// b.mu.
//
// A failure is not a membership change. The table over every endpoint
// (full) is built, maglev.NewWeighted's O(M log M), only when the
// endpoints, their weights or the config change; the endpoints that are
// down are taken out of it with maglev.Table.Without, a fraction of a
// build, which moves only their keys: every other key keeps its
// endpoint, and one that comes back takes back exactly the keys it had.
// Every channel that sees the same endpoints down computes the same
// table. With envoyCompatible the table of the usable endpoints is built
// instead, as Envoy does on a health change, so that it stays Envoy's.
func (b *maglevBalancer) rebuildTableLocked(members []maglev.Backend, down []string) error {
	slices.SortFunc(members, func(x, y maglev.Backend) int { return strings.Compare(x.Name, y.Name) })
	slices.Sort(down)
	same := b.table != nil && b.tableCfg.sameTable(b.cfg) && slices.Equal(members, b.members)
	if same && slices.Equal(down, b.down) {
		return nil
	}
	full := b.full
	if !same {
		if b.cfg.envoy {
			full = nil // not used: see below
		} else {
			var err error
			if full, err = b.cfg.newTable(members); err != nil {
				return fmt.Errorf("grpcmaglev: building the table: %w", err)
			}
		}
	}
	var t *maglev.Table
	var err error
	if b.cfg.envoy {
		// Envoy has no weight 0: a drained endpoint is left out, as Envoy
		// leaves out a drained host.
		usable := make([]maglev.Backend, 0, len(members))
		for _, m := range members {
			if _, isDown := slices.BinarySearch(down, m.Name); !isDown && m.Weight > 0 {
				usable = append(usable, m)
			}
		}
		t, err = b.cfg.newTable(usable)
	} else {
		t, err = full.Without(down...)
	}
	if err != nil {
		return fmt.Errorf("grpcmaglev: building the table: %w", err)
	}
	usable := 0
	for _, m := range members {
		if _, isDown := slices.BinarySearch(down, m.Name); !isDown && m.Weight > 0 {
			usable++
		}
	}
	if b.table == nil {
		logger.Infof("balancer %p: table built: %d of %d endpoints usable, %d slots", b, usable, len(b.children), t.Size())
	} else {
		moved := b.table.Diff(t)
		logger.Infof("balancer %p: table rebuilt: %d of %d endpoints usable, %d of %d slots moved", b, usable, len(b.children), moved, t.Size())
		b.metrics.rebuild(moved)
	}
	b.full, b.members, b.down, b.table, b.tableCfg = full, members, down, t, b.cfg
	return nil
}

// recordFailuresLocked updates each child's record: a child that entered
// TRANSIENT_FAILURE since the last call is stamped, and marked down until
// it is READY; records of removed endpoints are dropped. It marks the
// records it visits with the call's generation, and drops those left
// unmarked, so that it allocates nothing beyond the map's own lookups (and
// a record per new endpoint) and the result. It is O(n) for n children and
// records, and returns every endpoint and the names of those down,
// unsorted.
//
// An endpoint is down from its TRANSIENT_FAILURE until it is READY again,
// so one that comes back but waits for its first health check (pick_first
// reports CONNECTING meanwhile) does not take keys yet; a new endpoint is
// usable while it first connects. Caller holds b.mu.
func (b *maglevBalancer) recordFailuresLocked() (members []maglev.Backend, down []string) {
	b.gen++
	members = make([]maglev.Backend, 0, len(b.children))
	for _, cs := range b.children {
		r, ok := b.records.Get(cs.Endpoint)
		if !ok {
			r = &record{}
			b.records.Set(cs.Endpoint, r)
		}
		r.gen = b.gen
		switch st := cs.State.ConnectivityState; st {
		case connectivity.TransientFailure:
			if r.state != st {
				b.seq++
				r.seq = b.seq
			}
			r.down = true
		case connectivity.Ready:
			r.down = false
		}
		r.state = cs.State.ConnectivityState
		if !r.read || r.attrs != cs.Endpoint.Attributes {
			// Read once per resolver update, not on every child's report.
			r.weight, r.attrs, r.read = endpointWeight(cs.Endpoint), cs.Endpoint.Attributes, true
		}
		name := endpointName(cs.Endpoint)
		members = append(members, maglev.Backend{Name: name, Weight: r.weight})
		if r.down {
			down = append(down, name)
		}
	}
	for e, r := range b.records.All() {
		if r.gen != b.gen {
			b.records.Delete(e) // deleting during the iteration is safe: All ranges over a Go map
		}
	}
	return members, down
}

// newPickerLocked returns a picker over the children's current states and
// b.table, and the channel's aggregate state: READY if any child is,
// else CONNECTING, IDLE or TRANSIENT_FAILURE, in that order of precedence.
// Caller holds b.mu.
func (b *maglevBalancer) newPickerLocked() (balancer.Picker, connectivity.State) {
	p := &picker{
		table:   b.table,
		owners:  make([]*child, b.table.NumBackends()),
		header:  b.cfg.header,
		bounded: b.bounded,
		metrics: b.metrics,
		err:     ErrNoUsableEndpoint,
	}
	if len(b.children) == 0 {
		p.err = errNoEndpoints
		if b.resolverErr != nil {
			p.err = fmt.Errorf("%w: resolver error: %w", ErrNoUsableEndpoint, b.resolverErr)
		}
	}
	var counts [connectivity.Shutdown + 1]int
	var lastFail uint64
	drained := 0
	for _, cs := range b.children {
		c := &child{
			name:     endpointName(cs.Endpoint),
			state:    cs.State.ConnectivityState,
			picker:   cs.State.Picker,
			exitIdle: cs.ExitIdle,
		}
		if b.drainedLocked(c.name) {
			// Its connection stays, and the RPCs on it finish; no new
			// RPC goes to it, keyed (it owns no slot) or not, and its
			// state is not the channel's.
			drained++
			continue
		}
		counts[c.state]++
		switch c.state {
		case connectivity.Ready:
			p.ready = append(p.ready, c)
		case connectivity.Idle:
			p.idle = append(p.idle, c)
			p.waiting = true
		case connectivity.Connecting:
			p.waiting = true
		case connectivity.TransientFailure:
			if r, ok := b.records.Get(cs.Endpoint); ok && r.seq >= lastFail {
				p.failed, lastFail = c, r.seq
			}
			continue
		}
		if i := b.table.Index(c.name); i >= 0 {
			p.owners[i] = c
		}
	}
	switch {
	case counts[connectivity.Ready] > 0:
		return p, connectivity.Ready
	case counts[connectivity.Connecting] > 0:
		return p, connectivity.Connecting
	case counts[connectivity.Idle] > 0:
		return p, connectivity.Idle
	}
	if drained > 0 && drained == len(b.children) {
		p.err = fmt.Errorf("%w: every endpoint is drained (weight 0)", ErrNoUsableEndpoint)
	}
	return p, connectivity.TransientFailure
}

// drainedLocked reports whether the endpoint called name has weight 0
// (see endpointWeight) in b.members. It is O(log n). Caller holds b.mu.
func (b *maglevBalancer) drainedLocked(name string) bool {
	i, ok := slices.BinarySearchFunc(b.members, name, func(m maglev.Backend, name string) int { return strings.Compare(m.Name, name) })
	return ok && b.members[i].Weight == 0
}

// endpointName returns the name an endpoint has in the table: its ring-hash
// hash key if the resolver set one, else its first address ("" if it has
// none, which checkEndpoints rejects).
func endpointName(e resolver.Endpoint) string {
	if k := ringhash.HashKey(e); k != "" {
		return k
	}
	if len(e.Addresses) == 0 {
		return ""
	}
	return e.Addresses[0].Addr
}

// endpointWeight returns an endpoint's weight: its weight attribute
// (google.golang.org/grpc/experimental/balancer/weight), or 1 if it has
// none. An attribute of 0 is weight 0, which drains the endpoint, as in
// every package of the project. weight.FromEndpoint gives 0 for both, so
// an endpoint whose weight reads 0 is asked whether setting the attribute
// to 0 changes its attributes: only if it has no weight attribute does
// it. That costs a few allocations for an endpoint with attributes but
// no weight, once per resolver update (recordFailuresLocked keeps the
// result), never in a pick.
func endpointWeight(e resolver.Endpoint) uint32 {
	if w := weight.FromEndpoint(e).Weight; w > 0 {
		return w
	}
	if e.Attributes != nil && e.Attributes.Equal(weight.Set(e, weight.EndpointInfo{}).Attributes) {
		return 0 // set, to 0: drained
	}
	return 1 // not given
}

// checkEndpoints reports whether endpoints (after dropping exact duplicates,
// as endpointsharding does) can name a table of size slots: each has an
// address, and maglev.NewWeighted accepts their names, so they are
// non-empty, distinct, and no more than size. The names are checked by
// NewWeighted itself, over every endpoint with weight 0: a table with every
// backend drained is empty, so the check fills no slot. checkEndpoints is
// O(n log n) and allocates O(n).
func checkEndpoints(endpoints []resolver.Endpoint, size int) error {
	seen := resolver.NewEndpointMap[bool]()
	drained := make([]maglev.Backend, 0, len(endpoints))
	for i, e := range endpoints {
		if len(e.Addresses) == 0 {
			return fmt.Errorf("endpoint %d: %w", i, errNoAddress)
		}
		if _, dup := seen.Get(e); dup {
			continue
		}
		seen.Set(e, true)
		drained = append(drained, maglev.Backend{Name: endpointName(e)})
	}
	_, err := maglev.NewWeighted(drained, size, nil)
	return err
}
