package xdpmaglev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"

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
		for a, id := range c.ServerIDs {
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
	cfgs [quicConfigs]quicCfg         // by codepoint
	sids map[maglevQuicSid]maglevSlot // its entries in quic_servers
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

// sidKey returns quic_servers's key of server ID id of codepoint cp of
// service svc: its octets as the program loads them, two words.
func sidKey(svc uint32, cp uint8, id quiclb.ServerID) maglevQuicSid {
	var b [16]byte
	id.Append(b[:0])
	return maglevQuicSid{Svc: svc, Cp: uint32(cp), Sid: [2]uint64{binary.NativeEndian.Uint64(b[:8]), binary.NativeEndian.Uint64(b[8:])}}
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

// A staged QUIC-LB update: the entries and keys written for the next
// state, and how to undo them.
type quicStaged struct {
	wrote   map[maglevQuicSid]*maglevSlot // entries written, with the value each had (nil: none)
	newKeys []uint32                      // slots of quic_keys given a key
}

// stageQUIC writes next's QUIC-LB state but for the service's value:
// the AES contexts of its encrypted configurations whose key is new, in
// slots old does not use, and its entries of quic_servers that differ
// from old's (each backend's id and cookie, known once stageBackends ran).
// Entries of old's that next has not are deleted by finishQUIC, once the
// value names next's configurations. lb.mu is held.
func (lb *LB) stageQUIC(svc Service, old, next *service, st *quicStaged) error {
	q := next.opts.QUIC
	if q == nil {
		return nil
	}
	next.quic = &quicState{sids: map[maglevQuicSid]maglevSlot{}}
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
			be := next.backends[a]
			if be == nil {
				continue // Down: out of the data plane
			}
			k, v := sidKey(next.id, c.ID, id), maglevSlot{Id: be.id, Cookie: be.cookie}
			next.quic.sids[k] = v
			var had *maglevSlot
			if old.quic != nil {
				if ov, ok := old.quic.sids[k]; ok {
					if ov == v {
						continue
					}
					had = &ov
				}
			}
			if _, done := st.wrote[k]; !done {
				st.wrote[k] = had
			}
			if err := lb.objs.QuicServers.Put(k, v); err != nil {
				return fmt.Errorf("xdpmaglev: writing the server ID %v of %v (service %v): %w", id, a, svc, err)
			}
		}
	}
	return nil
}

// undoQUIC puts back what stageQUIC wrote, best effort (the error that
// made the update fail is the caller's). lb.mu is held.
func (lb *LB) undoQUIC(st *quicStaged) {
	for k, had := range st.wrote {
		if had != nil {
			_ = lb.objs.QuicServers.Put(k, *had)
		} else {
			_ = lb.objs.QuicServers.Delete(k)
		}
	}
	for _, slot := range st.newKeys {
		_ = lb.objs.QuicKeys.Put(slot, maglevQuicKey{})
	}
}

// finishQUIC removes what old had of QUIC-LB and next has not, once the
// service's value names next's configurations: its entries of
// quic_servers, and the AES contexts of its keys (their slots cleared; a
// packet still running with one holds it until it is done). lb.mu is held.
func (lb *LB) finishQUIC(svcID uint32, old, next *quicState) error {
	if old == nil {
		return nil
	}
	var errs []error
	for k := range old.sids {
		if next != nil {
			if _, ok := next.sids[k]; ok {
				continue
			}
		}
		if err := lb.objs.QuicServers.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("xdpmaglev: deleting a server ID of service %d: %w", svcID, err))
		}
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

// adoptQUIC rebuilds s's QUIC-LB state from its value v and its entries
// of quic_servers (sids, by service id): the configurations' keys are
// not known (a kptr reads back as 0), so the next update sets them anew.
func adoptQUIC(s *service, v maglevService, sids map[maglevQuicSid]maglevSlot) {
	if v.Flags&uint32(maglevConstsSVC_QUIC) == 0 {
		return
	}
	s.quic = &quicState{sids: maps.Clone(sids)}
	if s.quic.sids == nil {
		s.quic.sids = map[maglevQuicSid]maglevSlot{}
	}
	for i := range s.quic.cfgs {
		s.quic.cfgs[i].val = v.Quic[i]
	}
}

// adoptQUICMaps reads quic_servers's entries by service id, deleting
// those of services not in used, and clears the slots of quic_keys that
// no adopted service's configuration names. The LB is not shared yet.
func (lb *LB) adoptQUICMaps(used map[uint32]bool) error {
	var k maglevQuicSid
	var v maglevSlot
	var stale []maglevQuicSid
	for it := lb.objs.QuicServers.Iterate(); it.Next(&k, &v); {
		if !used[k.Svc] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := lb.objs.QuicServers.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("xdpmaglev: clearing a server ID no service names: %w", err)
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

// readQUICServers returns quic_servers's entries by service id.
func (lb *LB) readQUICServers() (map[uint32]map[maglevQuicSid]maglevSlot, error) {
	out := map[uint32]map[maglevQuicSid]maglevSlot{}
	var k maglevQuicSid
	var v maglevSlot
	it := lb.objs.QuicServers.Iterate()
	for it.Next(&k, &v) {
		if out[k.Svc] == nil {
			out[k.Svc] = map[maglevQuicSid]maglevSlot{}
		}
		out[k.Svc][k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading the QUIC-LB server IDs: %v", ErrLayout, err)
	}
	return out, nil
}
