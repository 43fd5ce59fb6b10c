package xdpmaglev

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/maglevlb/maglev/quiclb"
)

// QUIC, in ServiceOptions, routes a UDP service's QUIC packets by the
// server ID their destination connection ID carries (QUIC-LB,
// draft-ietf-quic-load-balancers; the codec is package quiclb): a packet
// whose ID names a backend of the service goes to it, with no conntrack
// lookup or entry, from whatever address and port the client sends it, so
// that a connection whose client migrates, or whose NAT rebinds, keeps its
// server, and so does one whose slot moves when the table changes. Long
// header Initial and 0-RTT packets, whose IDs the clients chose, and every
// packet whose ID names no backend of the service (the codepoint 0b111, a
// codepoint with no configuration, an unknown server ID, an ID cut short)
// go by the table as any UDP packet does, with the service's conntrack and
// second chance; Stats.QUIC counts each kind. docs/xdp.md, "QUIC by
// connection ID".
//
// The backends' QUIC servers issue connection IDs of the same
// configurations, each with its own server ID (quicmaglev's generator
// does for quic-go). An encrypted configuration's server IDs are
// decrypted by the kernel's AES, through the BPF crypto kfuncs of Linux
// 6.10 and later (ErrUnsupported on a kernel without them), and kept in a
// cache (Options.QUICCacheSize), so that a connection's packets after the
// first cost a lookup.
type QUIC struct {
	// Configs are the service's QUIC-LB configurations, one to seven,
	// each of its own codepoint (quiclb.Config.ID): the one the servers
	// issue connection IDs under, and any still in use by connections (a
	// key rotation keeps the old configuration until its connections have
	// moved to the new one's IDs or closed).
	Configs []QUICConfig
}

// A QUICConfig is one QUIC-LB configuration of a service, and its
// backends' server IDs in it.
type QUICConfig struct {
	quiclb.Config
	// ServerIDs are the server IDs of the service's backends in this
	// configuration, by the backend's address: each of the
	// configuration's ServerIDLen, none given twice. A backend with none
	// gets only what the table sends it; a Down one gets nothing by its
	// server ID either (its packets go by the table, as its tracked flows
	// do), and a draining one (weight 0) keeps getting its connections'
	// packets.
	ServerIDs map[netip.Addr]quiclb.ServerID
}

// quicConfigs is the number of codepoints a configuration may have.
const quicConfigs = int(maglevConstsQUIC_CONFIGS)

// defaultQUICCache is Options.QUICCacheSize's default.
const defaultQUICCache = 1 << 16

// checkQUIC checks q, the QUIC-LB options of svc with backends bs
// (prepared: addresses unmapped), and returns a copy of it, its keys and
// maps its own and its addresses unmapped.
func checkQUIC(svc Service, q *QUIC, bs []Backend) (*QUIC, error) {
	if svc.Proto != UDP {
		return nil, fmt.Errorf("%w %v: QUIC-LB routes UDP", ErrService, svc)
	}
	if len(q.Configs) == 0 || len(q.Configs) > quicConfigs {
		return nil, fmt.Errorf("%w %v: QUIC has %d configurations: 1 to %d, one per codepoint", ErrService, svc, len(q.Configs), quicConfigs)
	}
	in := make(map[netip.Addr]bool, len(bs))
	for _, b := range bs {
		in[b.Addr] = true
	}
	out := &QUIC{Configs: make([]QUICConfig, len(q.Configs))}
	var seen [quicConfigs]bool
	for i, c := range q.Configs {
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("%w %v: QUIC configuration %d: %w", ErrService, svc, c.ID, err)
		}
		if seen[c.ID] {
			return nil, fmt.Errorf("%w %v: QUIC configuration %d given twice", ErrService, svc, c.ID)
		}
		seen[c.ID] = true
		nc := QUICConfig{Config: c.Config, ServerIDs: make(map[netip.Addr]quiclb.ServerID, len(c.ServerIDs))}
		nc.Key = bytes.Clone(c.Key)
		owner := make(map[quiclb.ServerID]netip.Addr, len(c.ServerIDs))
		for _, a := range slices.SortedFunc(maps.Keys(c.ServerIDs), netip.Addr.Compare) { // in order: the same error every time
			id := c.ServerIDs[a]
			a = a.Unmap()
			switch {
			case !in[a]:
				return nil, fmt.Errorf("%w %v: QUIC configuration %d: server ID %v of %v, which is no backend of the service", ErrService, svc, c.ID, id, a)
			case id.Len() != c.ServerIDLen:
				return nil, fmt.Errorf("%w %v: QUIC configuration %d: server ID %v of %v is %d octets, and the configuration's %d", ErrBackend, svc, c.ID, id, a, id.Len(), c.ServerIDLen)
			}
			if o, dup := owner[id]; dup {
				return nil, fmt.Errorf("%w %v: QUIC configuration %d: server ID %v given to %v and %v", ErrBackend, svc, c.ID, id, o, a)
			}
			owner[id] = a
			nc.ServerIDs[a] = id
		}
		out.Configs[i] = nc
	}
	return out, nil
}

// quicState is what a service has of QUIC-LB in the data plane.
type quicState struct {
	cfgs [quicConfigs]quicCfg  // by codepoint
	sids map[sidKey]maglevSlot // its table of server IDs in quic_tables; nil where not known (adopted: written anew)
}

// sidKey is a server ID of a codepoint, as the program looks it up.
type sidKey struct {
	cp  uint8
	sid [2]uint64 // the ID's octets as words (struct quic_server_id)
}

// quicCfg is a configuration as the data plane has it.
type quicCfg struct {
	val maglevQuicCfg // as the service's value holds it
	key []byte        // the key in val.Key's slot of quic_keys; nil for plaintext, or where not known (adopted: set anew)
}

// vals returns the configurations as the service's value holds them.
func (q *quicState) vals() (v [quicConfigs]maglevQuicCfg) {
	if q == nil {
		return v
	}
	for i, c := range q.cfgs {
		v[i] = c.val
	}
	return v
}

// keySlots returns the slots of quic_keys q uses.
func (q *quicState) keySlots() map[uint32]bool {
	out := map[uint32]bool{}
	if q == nil {
		return out
	}
	for _, c := range q.cfgs {
		if c.val.Mode == uint8(maglevConstsQUIC_SINGLE) || c.val.Mode == uint8(maglevConstsQUIC_FOUR) {
			out[c.val.Key] = true
		}
	}
	return out
}

// quicMode returns the data plane's mode of c.
func quicMode(c quiclb.Config) uint8 {
	switch c.Mode() {
	case quiclb.SinglePass:
		return uint8(maglevConstsQUIC_SINGLE)
	case quiclb.FourPass:
		return uint8(maglevConstsQUIC_FOUR)
	}
	return uint8(maglevConstsQUIC_PLAIN)
}

// keyOf returns the key of server ID id of codepoint cp: its octets as
// the program loads them, two words in the host's byte order.
func keyOf(cp uint8, id quiclb.ServerID) sidKey {
	var b [16]byte
	id.Append(b[:0])
	return sidKey{cp: cp, sid: [2]uint64{binary.NativeEndian.Uint64(b[:8]), binary.NativeEndian.Uint64(b[8:])}}
}

// quicProbes is QUIC_PROBES: the most entries a lookup reads.
const quicProbes = int(maglevConstsQUIC_PROBES)

// quicHash is quic_hash's twin (bpf/quic.h): the hash by which an ID's
// entry is placed.
func quicHash(seed uint64, cp uint8, sid [2]uint64) uint32 {
	h := seed ^ uint64(cp)
	h ^= sid[0] * 0x9e3779b97f4a7c15
	h ^= sid[1] * 0xc2b2ae3d27d4eb4f
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	return uint32(h)
}

// sidTable returns the entries of a service's table of server IDs sids,
// its header first: a power of 2 of them, at least 8 and four times the
// IDs, each ID at most quicProbes from its hash's entry (linear probing),
// under the first seed that places them all so (a larger table if none
// of 64 does: at a quarter full, nearly always the first). It is
// deterministic: the IDs are placed in sorted order.
func sidTable(sids map[sidKey]maglevSlot) []maglevQuicEntry {
	keys := slices.SortedFunc(maps.Keys(sids), func(a, b sidKey) int {
		if c := cmp.Compare(a.cp, b.cp); c != 0 {
			return c
		}
		if c := cmp.Compare(a.sid[0], b.sid[0]); c != 0 {
			return c
		}
		return cmp.Compare(a.sid[1], b.sid[1])
	})
	size := 8
	for size < 4*len(keys) {
		size *= 2
	}
	for ; ; size *= 2 {
		mask := uint32(size - 1)
	seeds:
		for seed := range uint64(64) {
			t := make([]maglevQuicEntry, 1+size)
			t[0] = maglevQuicEntry{Sid: [2]uint64{seed, 0}, Cp: mask}
			for _, k := range keys {
				i := quicHash(seed, k.cp, k.sid)
				placed := false
				for p := range uint32(quicProbes) {
					if e := &t[1+(i+p)&mask]; e.Cp == 0 {
						*e = maglevQuicEntry{Sid: k.sid, Cp: 1 + uint32(k.cp), Be: sids[k]}
						placed = true
						break
					}
				}
				if !placed {
					continue seeds
				}
			}
			return t
		}
	}
}

// putSIDTable writes the table of server IDs sids of service id into a
// map of its own and swaps it in (or deletes the service's, for nil): the
// kernel waits for the packets that read the old one (an RCU grace
// period, about 10 ms). lb.mu is held.
func (lb *LB) putSIDTable(id uint32, sids map[sidKey]maglevSlot) error {
	if sids == nil {
		if err := lb.objs.QuicTables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("xdpmaglev: deleting a QUIC-LB table of server IDs: %w", err)
		}
		return nil
	}
	t := sidTable(sids)
	spec := *lb.quicInner
	spec.MaxEntries = uint32(len(t))
	m, err := ebpf.NewMap(&spec)
	if err != nil {
		return fmt.Errorf("xdpmaglev: creating a QUIC-LB table of server IDs: %w", err)
	}
	defer func() { _ = m.Close() }() // the map of tables holds it
	keys := make([]uint32, len(t))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := m.BatchUpdate(keys, t, nil); err != nil {
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("xdpmaglev: writing a QUIC-LB table of server IDs: %w", err)
		}
		for i := range t {
			if err := m.Put(uint32(i), t[i]); err != nil {
				return fmt.Errorf("xdpmaglev: writing a QUIC-LB table of server IDs: %w", err)
			}
		}
	}
	if err := lb.objs.QuicTables.Put(id, m); err != nil {
		return fmt.Errorf("xdpmaglev: swapping a QUIC-LB table of server IDs in: %w", err)
	}
	return nil
}

// masks returns the words of masks of a block's first n octets, as the
// program loads a block (bpf/quic.h): the host's byte order, which is
// the program's.
func masks(n int, words []uint64) {
	var b [8 * len(maglevQuicCfg{}.BlkMask)]byte
	for i := range n {
		b[i] = 0xff
	}
	for i := range words {
		words[i] = binary.NativeEndian.Uint64(b[8*i:])
	}
}

// cfgValue returns the data plane's value of configuration c.
func cfgValue(c quiclb.Config) maglevQuicCfg {
	v := maglevQuicCfg{Mode: quicMode(c), SidLen: uint8(c.ServerIDLen), Len: uint8(c.ServerIDLen + c.NonceLen)}
	masks(c.ServerIDLen, v.SidMask[:])
	masks(c.ServerIDLen+c.NonceLen, v.BlkMask[:])
	return v
}

// A staged QUIC-LB update: what stageQUIC wrote, to undo.
type quicStaged struct {
	svc     uint32
	table   bool                  // the service's table of server IDs was swapped
	oldSIDs map[sidKey]maglevSlot // the one before; nil: none, or not known
	newKeys []uint32              // slots of quic_keys given a key
}

// stageQUIC writes next's QUIC-LB state but for the service's value:
// the AES contexts of its encrypted configurations whose key is new, in
// slots old does not use, and its table of server IDs if it differs from
// old's (each backend's id and cookie, known once stageBackends ran: the
// entries of old's backends that leave still name them, until they are
// freed). Old's keys that next has not are cleared by finishQUIC, once the
// service's value names next's configurations. lb.mu is held.
func (lb *LB) stageQUIC(svc Service, old, next *service, st *quicStaged) error {
	q := next.opts.QUIC
	st.svc = next.id
	if q == nil {
		return nil
	}
	next.quic = &quicState{sids: map[sidKey]maglevSlot{}}
	for _, c := range q.Configs {
		val := cfgValue(c.Config)
		qc := quicCfg{val: val}
		if len(c.Key) != 0 {
			var prev quicCfg
			if old.quic != nil {
				prev = old.quic.cfgs[c.ID]
			}
			pv := prev.val
			if pv.Mode == val.Mode && pv.SidLen == val.SidLen && pv.Len == val.Len && prev.key != nil && bytes.Equal(prev.key, c.Key) {
				qc = prev // the same key, in the same slot
			} else {
				// A slot old does not use: the packets that read old's
				// value keep its key until finishQUIC.
				slot := (next.id*uint32(quicConfigs) + uint32(c.ID)) * 2
				if pv.Mode != 0 && pv.Mode != uint8(maglevConstsQUIC_PLAIN) && pv.Key == slot {
					slot++
				}
				if err := lb.setKey(slot, c.Key); err != nil {
					return fmt.Errorf("%w (service %v, QUIC configuration %d)", err, svc, c.ID)
				}
				st.newKeys = append(st.newKeys, slot)
				id, err := lb.newCookie()
				if err != nil {
					return err
				}
				qc.val.Key, qc.val.KeyId = slot, id
				qc.key = bytes.Clone(c.Key)
			}
		}
		next.quic.cfgs[c.ID] = qc
		for a, id := range c.ServerIDs {
			if be := next.backends[a]; be != nil { // not Down: in the data plane
				next.quic.sids[keyOf(c.ID, id)] = maglevSlot{Id: be.id, Cookie: be.cookie}
			}
		}
	}
	if old.quic != nil && old.quic.sids != nil && maps.Equal(old.quic.sids, next.quic.sids) {
		return nil
	}
	if err := lb.putSIDTable(next.id, next.quic.sids); err != nil {
		return fmt.Errorf("%w (service %v)", err, svc)
	}
	st.table = true
	if old.quic != nil {
		st.oldSIDs = old.quic.sids
	}
	return nil
}

// undoQUIC puts back what stageQUIC wrote, best effort (the error that
// made the update fail is the caller's): the table of server IDs before
// (none where it was not known), the new keys' slots cleared. lb.mu is
// held.
func (lb *LB) undoQUIC(st *quicStaged) {
	if st.table {
		_ = lb.putSIDTable(st.svc, st.oldSIDs)
	}
	for _, slot := range st.newKeys {
		_ = lb.objs.QuicKeys.Put(slot, maglevQuicKey{})
	}
}

// finishQUIC removes what old had of QUIC-LB and next has not, once the
// service's value names next's configurations: the AES contexts of its
// keys (their slots cleared; a packet still running with one holds it
// until it is done), and its table of server IDs if next has QUIC-LB no
// more. lb.mu is held.
func (lb *LB) finishQUIC(svcID uint32, old, next *quicState) error {
	if old == nil {
		return nil
	}
	var errs []error
	if next == nil {
		errs = append(errs, lb.putSIDTable(svcID, nil))
	}
	keep := next.keySlots()
	for slot := range old.keySlots() {
		if !keep[slot] {
			if err := lb.objs.QuicKeys.Put(slot, maglevQuicKey{}); err != nil {
				errs = append(errs, fmt.Errorf("xdpmaglev: clearing a QUIC-LB key of service %d: %w", svcID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// newCookie hands out a new cookie, recorded in the layout record first,
// so that no Load that adopts the maps hands it out again: a backend's,
// or a QUIC-LB key's id in quic_cache. lb.mu is held.
func (lb *LB) newCookie() (uint32, error) {
	lb.cookie++
	if lb.cookie == 0 {
		lb.cookie = 1
	}
	lb.rec.Cookie = lb.cookie
	if err := lb.objs.Layout.Put(uint32(0), lb.rec); err != nil {
		return 0, fmt.Errorf("xdpmaglev: writing the layout record: %w", err)
	}
	return lb.cookie, nil
}

// setKey makes the kernel's AES context of key in slot of quic_keys, by
// the program bpf/quic_key.c, loaded the first time. lb.mu is held.
func (lb *LB) setKey(slot uint32, key []byte) error {
	if lb.keyProg == nil {
		if !lb.kptr {
			return fmt.Errorf("%w: encrypted QUIC-LB needs the kernel's BPF crypto kfuncs (Linux 6.10 and later), which this kernel's BTF lacks", ErrUnsupported)
		}
		spec, err := loadQuickey()
		if err != nil {
			return fmt.Errorf("xdpmaglev: reading the QUIC-LB key program: %w", err)
		}
		spec.Maps["quic_keys"].MaxEntries = lb.objs.QuicKeys.MaxEntries()
		var objs quickeyPrograms
		if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"quic_keys": lb.objs.QuicKeys}}); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: encrypted QUIC-LB needs the kernel's BPF crypto kfuncs (Linux 6.10 and later): %v", ErrUnsupported, err)
			}
			return fmt.Errorf("xdpmaglev: loading the QUIC-LB key program: %w", err)
		}
		lb.keyProg = objs.QuicKeySet
	}
	args := quickeyQuicKeyArgs{Slot: slot}
	copy(args.Key[:], key)
	var out quickeyQuicKeyArgs
	if _, err := lb.keyProg.Run(&ebpf.RunOptions{Context: &args, ContextOut: &out}); err != nil {
		return fmt.Errorf("xdpmaglev: making a QUIC-LB key's AES context: %w", err)
	}
	if out.Err != 0 {
		return fmt.Errorf("%w: the kernel made no AES context (ecb(aes)) of a QUIC-LB key: errno %d", ErrUnsupported, -out.Err)
	}
	return nil
}

// kptrSpec gives quic_keys's field ctx the type the kernel reads it by, a
// kptr to its struct bpf_crypto_ctx, where the kernel has that type (the
// BPF crypto kfuncs, Linux 6.10 and later), and reports whether it does.
// Without it, the program's calls of the kfuncs are dead code (weak, and
// tested), and no encrypted configuration can be set.
func kptrSpec(spec *ebpf.CollectionSpec) bool {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	if _, err := kernel.AnyTypeByName("bpf_crypto_ctx"); err != nil {
		return false
	}
	ms := spec.Maps["quic_keys"]
	if ms == nil {
		return false
	}
	v, ok := btf.Copy(ms.Value).(*btf.Struct)
	if !ok || len(v.Members) != 1 {
		return false
	}
	v.Members[0].Type = &btf.Pointer{Target: &btf.TypeTag{Value: "kptr", Type: &btf.Struct{Name: "bpf_crypto_ctx"}}}
	ms.Value = v
	return true
}

// putQUIC returns the service value v with s's QUIC-LB configurations.
func putQUIC(v *maglevService, s *service) {
	if s.quic == nil {
		return
	}
	v.Flags |= uint32(maglevConstsSVC_QUIC)
	v.Quic = s.quic.vals()
}

// adoptQUIC rebuilds s's QUIC-LB state from its value v: the
// configurations' keys are not known (a kptr reads back as 0), nor its
// table of server IDs (reading a map of maps' inner map back takes
// CAP_SYS_ADMIN), so the next update writes them anew.
func adoptQUIC(s *service, v maglevService) {
	if v.Flags&uint32(maglevConstsSVC_QUIC) == 0 {
		return
	}
	s.quic = &quicState{}
	for i := range s.quic.cfgs {
		s.quic.cfgs[i].val = v.Quic[i]
	}
}

// adoptQUICMaps deletes the tables of server IDs of the services not in
// used, and clears the slots of quic_keys that no adopted service's
// configuration names. The LB is not shared yet.
func (lb *LB) adoptQUICMaps(used map[uint32]bool) error {
	for id := range uint32(lb.opts.MaxServices) {
		if !used[id] {
			if err := lb.putSIDTable(id, nil); err != nil {
				return err
			}
		}
	}
	inUse := map[uint32]bool{}
	for _, s := range lb.services {
		maps.Copy(inUse, s.quic.keySlots())
	}
	for slot := range lb.objs.QuicKeys.MaxEntries() {
		if !inUse[slot] {
			if err := lb.objs.QuicKeys.Put(slot, maglevQuicKey{}); err != nil {
				return fmt.Errorf("xdpmaglev: clearing a QUIC-LB key no service names: %w", err)
			}
		}
	}
	return nil
}
