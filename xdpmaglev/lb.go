package xdpmaglev

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/maglevlb/maglev"
	"go.opentelemetry.io/otel/metric"
)

// AttachMode says how the program is attached to the interface.
type AttachMode int

const (
	// AttachAuto attaches natively (in the driver) where the driver
	// supports XDP, and generically (after the kernel has built its
	// socket buffer, much slower) otherwise. The zero value.
	AttachAuto AttachMode = iota
	// AttachNative attaches in the driver, or fails.
	AttachNative
	// AttachGeneric attaches generically, whatever the driver supports.
	AttachGeneric
	// AttachNone is the mode of an LB loaded without an interface.
	AttachNone
)

// String returns "auto", "native", "generic" or "none".
func (m AttachMode) String() string {
	switch m {
	case AttachAuto:
		return "auto"
	case AttachNative:
		return "native"
	case AttachGeneric:
		return "generic"
	case AttachNone:
		return "none"
	}
	return fmt.Sprintf("AttachMode(%d)", int(m))
}

// Options configure Load. The zero value is ready to use.
type Options struct {
	// M is the table size of a service whose ServiceOptions.M is 0: a
	// prime, maglev.DefaultSize (65,537) if 0. A table of M slots takes
	// 8·(M+1) bytes of kernel memory.
	M int
	// Seed seeds the flow hash (see FlowHash). Load balancers that should
	// agree on where a new flow goes share it; a secret seed keeps
	// outsiders from aiming flows at one backend.
	Seed uint64
	// ConntrackSize is the number of flows connection tracking holds for
	// each address family, IPv4 and IPv6 (least recently used ones are
	// forgotten first): DefaultConntrackSize (262,144) if 0. An entry
	// takes 96 bytes of kernel memory in the IPv4 map and 120 in the IPv6
	// one: 54 MiB for the two at the default.
	ConntrackSize int
	// Mode is the attach mode; AttachAuto if zero.
	Mode AttachMode
	// MaxServices and MaxBackends bound the services, and the backends of
	// all services together (a backend in two services counts twice):
	// DefaultMaxServices and DefaultMaxBackends if 0.
	MaxServices, MaxBackends int
	// SourceMAC is the source address of forwarded frames: the
	// interface's address if nil.
	SourceMAC net.HardwareAddr
	// FloodRate bounds how fast new flows can turn connection tracking
	// over: the most entries it writes a second, over all CPUs (each CPU
	// has its share, and may spend ten seconds of it at once). A new flow
	// beyond it is routed by the table alone, with no entry written: while
	// the backends stay the same, that is where an entry would have sent
	// it, and no flood of spoofed tuples, at any rate, evicts the entries
	// of idle established flows faster. An entry idle for less than
	// ConntrackSize/FloodRate − 10 seconds outlives any flood. 0:
	// ConntrackSize/130, which keeps entries idle for up to two minutes
	// (2,016 entries a second at the default ConntrackSize); -1: no guard.
	// docs/xdp-design.md, "The flood guard", has the sizing rule.
	FloodRate int
	// MeterProvider receives the data plane's counters as observable
	// counters, summed over CPUs when a reader collects them
	// (docs/metrics.md lists them): otel.GetMeterProvider() if nil, which
	// records nothing until the application installs an SDK.
	MeterProvider metric.MeterProvider
	// PinPath, a directory in a BPF filesystem (/sys/fs/bpf/l4lb/eth0,
	// say: one per interface), makes the data plane outlive the process:
	// Load pins every map and the program's link there, and Release
	// leaves them, the program attached and forwarding. A Load that finds
	// them adopts them: the services, backends, connection tracking and
	// counters go on, and the new program replaces the old one on the
	// link in one step, so that no packet meets no program. Load checks
	// first that their layout is this package's (ErrLayout otherwise)
	// and that they were made with the same ConntrackSize, MaxServices,
	// MaxBackends, interface and attach mode (ErrPinned otherwise); one
	// LB at a time holds the directory (ErrInUse). Close removes the
	// pins. Empty: nothing is pinned, and Close or the end of the process
	// detaches the program and frees the maps. docs/xdp.md, "Restarts and
	// upgrades".
	PinPath string
	// Changed, if not nil, is called after the LB changed a service's
	// table on its own: a ForwardL2 backend that was Unresolved resolved,
	// or one's MAC changed. It is called from the LB's refresh goroutine,
	// with no lock held, one call at a time; the LB's methods may be
	// called from it.
	Changed func(Service)
	// QUICCacheSize is the number of encrypted QUIC-LB connection IDs
	// whose server IDs the data plane keeps, decrypted (least recently
	// used ones are forgotten first, and decrypted again when their next
	// packet comes): 65,536 if 0. An entry takes about 100 bytes of
	// kernel memory. See QUIC.
	QUICCacheSize int
	// Rebuild lets Load replace pinned maps it cannot adopt (ErrLayout,
	// ErrPinned) with new, empty ones: the services and connection
	// tracking are lost. A link on the same interface in the mode asked
	// for is kept and given the new program.
	Rebuild bool
}

// The sizes of the data plane's maps that Options' zero values take.
const (
	DefaultConntrackSize = 1 << 18 // Options.ConntrackSize
	DefaultMaxServices   = 64      // Options.MaxServices
	DefaultMaxBackends   = 4096    // Options.MaxBackends
)

const (
	maxEntries = 1 << 24
	// floodIdle is the time, in seconds, that the default FloodRate
	// keeps an idle entry through any flood, plus the guard's ten seconds
	// of burst.
	floodIdle = 120 + 10
	noBackend = uint32(maglevConstsNO_BACKEND)
)

// An LB is the XDP load balancer loaded into the kernel, and possibly
// attached to an interface. Its methods are safe for concurrent use by
// multiple goroutines.
type LB struct {
	mu        sync.Mutex // guards the fields below and the maps' contents
	objs      maglevObjects
	inner     *ebpf.MapSpec // a table's spec
	link      link.Link     // nil if not attached
	mode      AttachMode
	ifindex   int
	neigh     *neighbours // resolves backends' addresses; nil without an interface
	drv       *driver     // reads the driver's XDP counters; nil without an interface
	opts      Options
	services  map[Service]*service
	svcFree   []uint32      // free service ids, oldest first
	beFree    []uint32      // free backend ids, oldest first
	cookie    uint32        // the last backend cookie handed out
	gen       uint64        // the last service install
	stop      chan struct{} // closed by Close: ends refresh
	done      chan struct{} // closed when refresh has ended
	metrics   *metrics
	kptr      bool                         // the kernel reads quic_keys's contexts (kptrSpec): encrypted QUIC-LB can be set
	quicInner *ebpf.MapSpec                // a table of QUIC-LB server IDs' spec
	keyProg   *ebpf.Program                // bpf/quic_key.c's, loaded by the first encrypted QUIC-LB configuration; nil before
	pins      *pinned                      // nil without Options.PinPath
	rec       maglevLayoutRecord           // the layout record, as the layout map holds it
	adopted   bool                         // Load adopted pinned maps
	handoffs  map[Service][]pendingHandoff // SetHandoffs's, until their services are created
	closed    bool
}

// Load loads the data plane into the kernel and attaches it to the
// interface named iface, in opts.Mode. With AttachAuto it attaches natively
// if the driver supports XDP and generically otherwise: Mode says which.
// An empty iface loads the program without attaching it (Mode AttachNone):
// its services can be set and read, and the package's tests run it with
// BPF_PROG_TEST_RUN.
//
// With opts.PinPath, Load adopts the maps and the link pinned there, if
// any (see Options.PinPath), and pins its own otherwise.
//
// Load needs CAP_BPF and CAP_NET_ADMIN (root, usually). It works in the
// network namespace of the calling thread; the LB's methods may then be
// called from any. Close detaches the program and frees its maps.
func Load(iface string, opts Options) (*LB, error) {
	if err := normalize(&opts); err != nil {
		return nil, err
	}
	var ifc *net.Interface
	if iface != "" {
		var err error
		if ifc, err = net.InterfaceByName(iface); err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrInterface, iface, err)
		}
		if opts.SourceMAC == nil {
			if len(ifc.HardwareAddr) != 6 {
				return nil, fmt.Errorf("%w %q: no Ethernet address", ErrInterface, iface)
			}
			opts.SourceMAC = ifc.HardwareAddr
		}
	}
	spec, hash, table, err := programSpec(opts)
	if err != nil {
		return nil, err
	}
	lb := &LB{inner: table, mode: AttachNone, opts: opts, services: map[Service]*service{}, quicInner: innerSpec(spec, "quic_tables")}
	ifindex := 0
	if ifc != nil {
		ifindex = ifc.Index
	}
	if err := lb.load(spec, hash, ifindex); err != nil {
		return nil, err
	}
	if ifc == nil {
		return lb, nil
	}
	if err := lb.start(ifc); err != nil {
		_ = lb.metrics.close()
		lb.undoLoad()
		return nil, err
	}
	return lb, nil
}

// programSpec returns the program's spec for opts, its maps sized and
// its constants set; the hash of its maps' layout, taken before the sizes
// are set (it leaves them out); and the spec of a service's table.
func programSpec(opts Options) (*ebpf.CollectionSpec, uint64, *ebpf.MapSpec, error) {
	spec, err := loadMaglev()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("xdpmaglev: reading the program: %w", err)
	}
	hash := specHash(spec)
	var mac [6]byte
	copy(mac[:], opts.SourceMAC)
	cost, err := floodCost(opts.FloodRate)
	if err != nil {
		return nil, 0, nil, err
	}
	for name, v := range map[string]any{"hash_seed": opts.Seed, "lb_mac": mac, "flood_cost": cost} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, 0, nil, fmt.Errorf("xdpmaglev: setting %s: %w", name, err)
		}
	}
	sizes := map[string]int{"MaxServices": opts.MaxServices, "MaxBackends": opts.MaxBackends, "ConntrackSize": opts.ConntrackSize, "QUICCacheSize": opts.QUICCacheSize}
	for name, opt := range sizeOption {
		spec.Maps[name].MaxEntries = uint32(sizes[opt] * max(1, sizeFactor[name]))
	}
	spec.Maps["tables"].InnerMap.MaxEntries = 1 + uint32(opts.M)
	return spec, hash, innerSpec(spec, "tables"), nil
}

// innerSpec returns the spec of the inner maps of map name of spec, which
// SetService creates of each service's size (BPF_F_INNER_MAP lets their
// sizes differ): without its BTF, which the kernel would otherwise load
// anew every time.
func innerSpec(spec *ebpf.CollectionSpec, name string) *ebpf.MapSpec {
	m := spec.Maps[name].InnerMap.Copy()
	m.Key, m.Value = nil, nil
	return m
}

// load loads spec into the kernel, with the maps pinned at
// opts.PinPath if any: it adopts them and their services, or pins its
// own; then it writes the layout record and makes the metrics. On an
// error it has released what it took.
func (lb *LB) load(spec *ebpf.CollectionSpec, hash uint64, ifindex int) error {
	var copts *ebpf.CollectionOptions
	if lb.opts.PinPath != "" {
		var err error
		if lb.pins, err = openPins(lb.opts, spec, ifindex); err != nil {
			return err
		}
		if !lb.pins.fresh {
			copts = &ebpf.CollectionOptions{MapReplacements: lb.pins.maps}
		}
	}
	lb.kptr = kptrSpec(spec) // after the pins' check, which hashes the spec as built
	err := spec.LoadAndAssign(&lb.objs, copts)
	if lb.pins != nil {
		lb.pins.closeMaps() // the LB's objects hold their own copies
	}
	if err != nil {
		lb.undoLoad()
		return fmt.Errorf("xdpmaglev: loading the program: %w", err)
	}
	lb.rec = maglevLayoutRecord{Version: layoutVersion, Spec: hash, Ifindex: uint32(ifindex)}
	if ifindex != 0 && lb.pins != nil {
		if lb.rec.Netns, err = netnsID(); err != nil {
			lb.undoLoad()
			return err
		}
	}
	if lb.pins == nil || lb.pins.fresh {
		for i := range uint32(lb.opts.MaxServices) {
			lb.svcFree = append(lb.svcFree, i)
		}
		for i := range uint32(lb.opts.MaxBackends) {
			lb.beFree = append(lb.beFree, i)
		}
		if lb.pins != nil {
			err = lb.pins.pinAll(lb.objs.byName(), stateMaps(spec))
		}
	} else {
		lb.adopted = true
		err = lb.adopt(lb.pins.rec.Cookie)
	}
	if err == nil {
		lb.rec.Cookie = lb.cookie
		if err = lb.objs.Layout.Put(uint32(0), lb.rec); err != nil {
			err = fmt.Errorf("xdpmaglev: writing the layout record: %w", err)
		}
	}
	if err == nil {
		lb.metrics, err = newMetrics(lb, lb.opts.MeterProvider)
	}
	if err != nil {
		lb.undoLoad()
		return err
	}
	return nil
}

// undoLoad releases what load took, on an error: the pins it made, not
// the ones it adopted, and the program and maps.
func (lb *LB) undoLoad() {
	if lb.pins != nil {
		if lb.pins.fresh {
			_, _ = removePins(lb.pins.dir, false) // best effort: the error is Load's
		}
		lb.pins.close()
	}
	_ = lb.objs.Close()
}

// start attaches the loaded LB to ifc, with what it needs there (the
// neighbour table's watch, the driver's counters), and starts the
// refresh. On an error it has released those.
func (lb *LB) start(ifc *net.Interface) error {
	lb.ifindex = ifc.Index
	var err error
	if lb.neigh, err = newNeighbours(ifc.Index); err != nil {
		return err
	}
	if lb.drv, err = newDriver(ifc.Name); err != nil {
		lb.neigh.close()
		return err
	}
	if err := lb.attach(ifc, lb.opts.Mode); err != nil {
		lb.drv.close()
		lb.neigh.close()
		return err
	}
	lb.stop, lb.done = make(chan struct{}), make(chan struct{})
	go lb.refresh(refreshEvery)
	return nil
}

// Validate checks o as Load does before it touches the kernel: an error
// wrapping ErrOptions that names the field at fault, or nil. A field's
// zero value is valid: it takes the default its doc states.
func (o Options) Validate() error { return normalize(&o) }

// normalize fills in o's defaults and checks it.
func normalize(o *Options) error {
	if o.M == 0 {
		o.M = maglev.DefaultSize
	}
	if err := maglev.CheckSize(o.M); err != nil {
		return fmt.Errorf("%w: M: %w", ErrOptions, err)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"ConntrackSize", &o.ConntrackSize, DefaultConntrackSize},
		{"MaxServices", &o.MaxServices, DefaultMaxServices},
		{"MaxBackends", &o.MaxBackends, DefaultMaxBackends},
		{"QUICCacheSize", &o.QUICCacheSize, defaultQUICCache},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 1 || *f.v > maxEntries {
			return fmt.Errorf("%w: %s %d not in [1, %d]", ErrOptions, f.name, *f.v, maxEntries)
		}
	}
	switch {
	case o.FloodRate == 0:
		o.FloodRate = max(1, o.ConntrackSize/floodIdle)
	case o.FloodRate < -1 || o.FloodRate > 1<<31:
		return fmt.Errorf("%w: FloodRate %d not -1 (off) or in [1, 2^31]", ErrOptions, o.FloodRate)
	}
	if o.Mode < AttachAuto || o.Mode > AttachGeneric {
		return fmt.Errorf("%w: Mode %v", ErrOptions, o.Mode)
	}
	if o.SourceMAC != nil && len(o.SourceMAC) != 6 {
		return fmt.Errorf("%w: SourceMAC %v is not 6 bytes", ErrOptions, o.SourceMAC)
	}
	return nil
}

// floodCost returns the program's flood_cost for FloodRate rate (-1:
// none): the ns of credit one CPU spends on a conntrack entry, so that the
// CPUs together write at most rate entries a second.
func floodCost(rate int) (uint64, error) {
	if rate < 0 {
		return 0, nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, fmt.Errorf("xdpmaglev: counting the CPUs: %w", err)
	}
	return uint64(cpus) * 1e9 / uint64(rate), nil
}

// attach attaches the program to ifc in mode: on the pinned link, if
// Load adopted one, by replacing its program (BPF_LINK_UPDATE: each packet
// meets the old program or the new one); else by a new link, which it
// pins with Options.PinPath.
func (lb *LB) attach(ifc *net.Interface, mode AttachMode) error {
	if p := lb.pins; p != nil && p.link != nil {
		if err := p.link.Update(lb.objs.XdpMaglev); err != nil {
			return fmt.Errorf("%w: replacing the program on the link pinned in %s: %w", ErrAttach, p.dir, err)
		}
		lb.link, lb.mode, p.link = p.link, p.mode, nil
		return nil
	}
	if err := lb.attachNew(ifc, mode); err != nil {
		return err
	}
	if lb.pins != nil {
		if err := lb.link.Pin(filepath.Join(lb.pins.dir, linkPin)); err != nil {
			_ = lb.link.Close()
			lb.link = nil
			return fmt.Errorf("xdpmaglev: pinning the link: %w", err)
		}
	}
	return nil
}

func (lb *LB) attachNew(ifc *net.Interface, mode AttachMode) error {
	try := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: lb.objs.XdpMaglev, Interface: ifc.Index, Flags: flags})
	}
	var err error
	if mode == AttachAuto || mode == AttachNative {
		if lb.link, err = try(link.XDPDriverMode); err == nil {
			lb.mode = AttachNative
			return nil
		}
		if mode == AttachNative {
			return fmt.Errorf("%w: natively to %s: %w", ErrAttach, ifc.Name, err)
		}
	}
	if lb.link, err = try(link.XDPGenericMode); err != nil {
		return fmt.Errorf("%w: generically to %s: %w", ErrAttach, ifc.Name, err)
	}
	lb.mode = AttachGeneric
	return nil
}

// Mode returns how the program is attached: AttachNative, AttachGeneric,
// or AttachNone for an LB loaded without an interface.
func (lb *LB) Mode() AttachMode { return lb.mode }

// Close detaches the program, if attached, and closes the program and
// every map, which the kernel then frees; with Options.PinPath, it
// removes the pins and the directory too. Close is idempotent, and does
// nothing after Release.
func (lb *LB) Close() error { return lb.shutdown(true) }

// shutdown ends the LB: with detach, as Close does; without, as Release
// does.
func (lb *LB) shutdown(detach bool) error {
	lb.mu.Lock()
	if lb.closed {
		lb.mu.Unlock()
		return nil
	}
	lb.closed = true
	for _, s := range lb.services {
		if s.prevTimer != nil {
			s.prevTimer.Stop() // a pinned data plane keeps its second hops: the next LB times them out (adoptModes)
		}
	}
	lb.mu.Unlock()
	if lb.stop != nil {
		close(lb.stop)
		<-lb.done // refresh takes the lock: wait for it unlocked
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var errs []error
	if lb.link != nil {
		if detach && lb.pins != nil {
			// Detached whoever else holds the link; then unpinned and
			// closed, it is freed.
			if err := lb.link.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
				errs = append(errs, fmt.Errorf("xdpmaglev: detaching: %w", err))
			}
			if err := lb.link.Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("xdpmaglev: removing the link's pin: %w", err))
			}
		}
		if err := lb.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("xdpmaglev: detaching: %w", err))
		}
	}
	if lb.neigh != nil {
		lb.neigh.close()
	}
	if lb.drv != nil {
		lb.drv.close()
	}
	if err := lb.metrics.close(); err != nil {
		errs = append(errs, err)
	}
	if lb.keyProg != nil {
		_ = lb.keyProg.Close()
	}
	if err := lb.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("xdpmaglev: closing: %w", err))
	}
	if p := lb.pins; p != nil {
		if detach {
			if _, err := removePins(p.dir, true); err != nil {
				errs = append(errs, err)
			} else if err := os.Remove(p.dir); err != nil {
				errs = append(errs, fmt.Errorf("xdpmaglev: removing PinPath: %w", err))
			}
		}
		p.close()
	}
	return errors.Join(errs...)
}

// addrWords lays an address out as struct flow and struct svc_key hold it:
// the bytes in network order, an IPv4 address in the first word.
func addrWords(a netip.Addr) (w [4]uint32) {
	var b [16]byte
	if a.Is4() {
		a4 := a.As4()
		copy(b[:], a4[:])
	} else {
		b = a.As16()
	}
	for i := range w {
		w[i] = nativeWord(b[4*i : 4*i+4])
	}
	return w
}
