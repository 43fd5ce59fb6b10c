package xdpmaglev

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// A pin directory (Options.PinPath) holds each map of bpf/maps.h under
// its name there, and the XDP link as linkPin. The map layout, which
// holds the layout record, is pinned first and removed last: a directory
// with pins and no layout is not xdpmaglev's, and is left alone.
const (
	linkPin       = "link"
	layoutPin     = "layout"
	layoutVersion = uint32(maglevConstsLAYOUT_VERSION)
)

// sizeOption names the Options field that sizes each map of a size that
// depends on them.
var sizeOption = map[string]string{
	"services4": "MaxServices", "services6": "MaxServices", "tables": "MaxServices", "service_stats": "MaxServices",
	"vips4": "MaxServices", "vips6": "MaxServices",
	"backends": "MaxBackends", "nexthops": "MaxBackends", "backend_stats": "MaxBackends", "down": "MaxBackends",
	"conntrack4": "ConntrackSize", "conntrack6": "ConntrackSize",
	"quic_tables": "MaxServices", "quic_keys": "MaxServices", "quic_cache": "QUICCacheSize",
}

// sizeFactor is the entries a map has per unit of its sizeOption: two
// QUIC-LB keys (one and its successor) per service and codepoint; 1 for
// those not named.
var sizeFactor = map[string]int{"quic_keys": 2 * quicConfigs}

// pinned is an LB's hold on its pin directory: locked while the LB holds
// it, so that two LBs never share the maps.
type pinned struct {
	dir   string
	lock  *os.File             // the directory, locked
	maps  map[string]*ebpf.Map // the pinned maps to adopt, by name; nil: none (fresh maps are pinned after loading)
	link  link.Link            // the pinned link to give the new program; nil: attach anew
	mode  AttachMode           // link's
	rec   maglevLayoutRecord   // the adopted maps' record
	fresh bool                 // the maps are this LB's own: a failed Load removes their pins
}

// stateMaps returns the names of the maps spec pins: all but the data
// sections (.rodata: the load-time constants, which each Load sets anew).
func stateMaps(spec *ebpf.CollectionSpec) []string {
	var out []string
	for name := range spec.Maps {
		if !strings.HasPrefix(name, ".") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// specHash returns a hash of what the pinned maps' contents depend on:
// each state map's name, type, key and value sizes, flags, the layout of
// its key and value types (every field's name, offset and type), and the
// same of a map-in-map's inner map; not the numbers of entries, which the
// Options set and Load checks one by one. TestLayoutVersion keeps it
// beside LAYOUT_VERSION.
func specHash(spec *ebpf.CollectionSpec) uint64 {
	h := sha256.New()
	for _, name := range stateMaps(spec) {
		_, _ = fmt.Fprintf(h, "map %s ", name)
		writeMapSpec(h, spec.Maps[name])
		_, _ = io.WriteString(h, "\n")
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}

func writeMapSpec(w io.Writer, ms *ebpf.MapSpec) {
	_, _ = fmt.Fprintf(w, "type %v key %d value %d flags %#x key ", ms.Type, ms.KeySize, ms.ValueSize, ms.Flags)
	writeType(w, ms.Key, 0)
	_, _ = io.WriteString(w, " value ")
	writeType(w, ms.Value, 0)
	if ms.InnerMap != nil {
		_, _ = io.WriteString(w, " inner {")
		writeMapSpec(w, ms.InnerMap)
		_, _ = io.WriteString(w, "}")
	}
}

// writeType writes t's layout: sizes, fields with their offsets, element
// counts; typedefs and qualifiers are looked through.
func writeType(w io.Writer, t btf.Type, depth int) {
	if t == nil {
		_, _ = io.WriteString(w, "-")
		return
	}
	if depth > 8 {
		_, _ = io.WriteString(w, "...")
		return
	}
	switch t := btf.UnderlyingType(t).(type) {
	case *btf.Int:
		_, _ = fmt.Fprintf(w, "int%d/%v", t.Size, t.Encoding)
	case *btf.Enum:
		_, _ = fmt.Fprintf(w, "enum%d", t.Size)
	case *btf.Pointer:
		_, _ = io.WriteString(w, "ptr")
	case *btf.Array:
		_, _ = fmt.Fprintf(w, "[%d]", t.Nelems)
		writeType(w, t.Type, depth+1)
	case *btf.Struct:
		writeMembers(w, "struct", t.Size, t.Members, depth)
	case *btf.Union:
		writeMembers(w, "union", t.Size, t.Members, depth)
	default:
		_, _ = fmt.Fprintf(w, "%T", t)
	}
}

func writeMembers(w io.Writer, kind string, size uint32, ms []btf.Member, depth int) {
	_, _ = fmt.Fprintf(w, "%s%d{", kind, size)
	for _, m := range ms {
		_, _ = fmt.Fprintf(w, "%s@%d:%d ", m.Name, m.Offset, m.BitfieldSize)
		writeType(w, m.Type, depth+1)
		_, _ = io.WriteString(w, ";")
	}
	_, _ = io.WriteString(w, "}")
}

// byName returns the maps by their names in bpf/maps.h.
func (o *maglevMaps) byName() map[string]*ebpf.Map {
	v := reflect.ValueOf(o).Elem()
	out := make(map[string]*ebpf.Map, v.NumField())
	for i := range v.NumField() {
		if name := v.Type().Field(i).Tag.Get("ebpf"); name != "" {
			out[name], _ = v.Field(i).Interface().(*ebpf.Map)
		}
	}
	return out
}

// openPins locks opts.PinPath (making it if needed) and reads what it
// holds, for Load: nothing, or maps to adopt and possibly the link. With
// opts.Rebuild, pins it cannot adopt are removed (a link on this
// interface, in the mode asked for, is kept for the new program).
func openPins(opts Options, spec *ebpf.CollectionSpec, ifindex int) (_ *pinned, err error) {
	dir := opts.PinPath
	if err := onBPFFS(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("xdpmaglev: PinPath: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	p := &pinned{dir: dir, lock: lock}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	names, err := p.entries()
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		p.fresh = true
		return p, nil
	}
	if !slices.Contains(names, layoutPin) {
		return nil, fmt.Errorf("%w: %s holds %s and no layout record: not pins of xdpmaglev, which are left alone (remove them, or give another PinPath)", ErrLayout, dir, strings.Join(names, ", "))
	}
	netns := uint64(0)
	if ifindex != 0 {
		if netns, err = netnsID(); err != nil {
			return nil, err
		}
	}
	mapErr := p.loadMaps(spec, netns, ifindex)
	linkErr := p.loadLink(ifindex, opts.Mode)
	if mapErr == nil && linkErr == nil {
		return p, nil
	}
	if !opts.Rebuild {
		return nil, errors.Join(mapErr, linkErr)
	}
	if linkErr != nil {
		p.dropLink()
	}
	if mapErr != nil {
		if err := p.removeMaps(); err != nil {
			return nil, err
		}
		p.fresh = true
	}
	return p, nil
}

// entries returns the names in the pin directory.
func (p *pinned) entries() ([]string, error) {
	des, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: reading PinPath: %w", err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out, nil
}

// loadMaps opens the pinned maps and checks that this package can adopt
// them for these Options (spec, sized by them), in network namespace netns
// on interface ifindex (both 0: no interface).
func (p *pinned) loadMaps(spec *ebpf.CollectionSpec, netns uint64, ifindex int) error {
	p.maps = map[string]*ebpf.Map{}
	lm, err := ebpf.LoadPinnedMap(filepath.Join(p.dir, layoutPin), nil)
	if err != nil {
		return fmt.Errorf("%w: %s: the layout record: %v", ErrLayout, p.dir, err)
	}
	p.maps[layoutPin] = lm
	var rec maglevLayoutRecord
	if lm.ValueSize() != spec.Maps[layoutPin].ValueSize || lm.MaxEntries() != 1 {
		return fmt.Errorf("%w: %s: a layout record of %d bytes, not %d: made by another version", ErrLayout, p.dir, lm.ValueSize(), spec.Maps[layoutPin].ValueSize)
	}
	if err := lm.Lookup(uint32(0), &rec); err != nil {
		return fmt.Errorf("%w: %s: reading the layout record: %v", ErrLayout, p.dir, err)
	}
	switch {
	case rec.Version == 0:
		return fmt.Errorf("%w: %s: half made (the Load that made it stopped before it was done)", ErrLayout, p.dir)
	case rec.Version != layoutVersion:
		return fmt.Errorf("%w: %s: layout version %d, and this package's is %d", ErrLayout, p.dir, rec.Version, layoutVersion)
	case rec.Spec != specHash(spec):
		return fmt.Errorf("%w: %s: layout version %d with other maps (%#x, not %#x): a build that changed them without raising LAYOUT_VERSION", ErrLayout, p.dir, rec.Version, rec.Spec, specHash(spec))
	case rec.Ifindex != 0 && ifindex == 0:
		return fmt.Errorf("%w: %s: made for interface index %d, and Load has none", ErrPinned, p.dir, rec.Ifindex)
	case rec.Netns != 0 && netns != 0 && rec.Netns != netns:
		return fmt.Errorf("%w: %s: made in another network namespace (inode %d, not %d): a PinPath per interface and namespace", ErrPinned, p.dir, rec.Netns, netns)
	}
	p.rec = rec
	for _, name := range stateMaps(spec) {
		if name == layoutPin {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(p.dir, name), nil)
		if err != nil {
			return fmt.Errorf("%w: %s: map %s: %v", ErrLayout, p.dir, name, err)
		}
		p.maps[name] = m
		ms := spec.Maps[name]
		if err := ms.Compatible(m); err != nil {
			if opt := sizeOption[name]; opt != "" && m.Type() == ms.Type && m.KeySize() == ms.KeySize && m.ValueSize() == ms.ValueSize && m.MaxEntries() != ms.MaxEntries {
				return fmt.Errorf("%w: %s: map %s holds %d entries, and Options.%s makes %d: give the same %s, or Rebuild", ErrPinned, p.dir, name, m.MaxEntries(), opt, ms.MaxEntries, opt)
			}
			return fmt.Errorf("%w: %s: map %s: %v", ErrLayout, p.dir, name, err)
		}
	}
	return nil
}

// loadLink opens the pinned link, if any, and checks that it is on
// interface ifindex in a mode that mode allows. A link whose interface is
// gone is removed: the maps are adopted, and the program attached anew.
func (p *pinned) loadLink(ifindex int, mode AttachMode) error {
	path := filepath.Join(p.dir, linkPin)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: the link: %v", ErrLayout, p.dir, err)
	}
	p.link = l
	info, err := l.Info()
	if err != nil {
		return fmt.Errorf("%w: %s: the link: %v", ErrLayout, p.dir, err)
	}
	xdp := info.XDP()
	switch {
	case xdp == nil:
		return fmt.Errorf("%w: %s: the link is of type %v, not XDP", ErrLayout, p.dir, info.Type)
	case xdp.Ifindex == 0: // its interface is gone
		p.dropLink()
		return nil
	case ifindex == 0:
		return fmt.Errorf("%w: %s: attached to interface index %d, and Load has none", ErrPinned, p.dir, xdp.Ifindex)
	case int(xdp.Ifindex) != ifindex:
		return fmt.Errorf("%w: %s: attached to interface index %d, not %d", ErrPinned, p.dir, xdp.Ifindex, ifindex)
	}
	if p.mode, err = xdpMode(ifindex); err != nil {
		return err
	}
	if (mode == AttachNative || mode == AttachGeneric) && p.mode != mode {
		return fmt.Errorf("%w: %s: attached %v, and Options.Mode is %v", ErrPinned, p.dir, p.mode, mode)
	}
	return nil
}

// dropLink detaches the pinned link's program and removes the link.
func (p *pinned) dropLink() {
	if p.link == nil {
		return
	}
	_ = p.link.Detach() // best effort: the link is released once unpinned and closed
	_ = p.link.Unpin()
	_ = p.link.Close()
	p.link = nil
}

// closeMaps closes the maps opened to adopt (the LB's objects hold
// copies).
func (p *pinned) closeMaps() {
	for _, m := range p.maps {
		_ = m.Close()
	}
	p.maps = nil
}

// removeMaps closes and removes the maps' pins: every pin but the link's,
// the layout record last.
func (p *pinned) removeMaps() error {
	p.closeMaps()
	_, err := removePins(p.dir, false)
	return err
}

// removePins removes the pins in dir, the link's only if link, the
// layout record's last; it returns their paths.
func removePins(dir string, withLink bool) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: reading PinPath: %w", err)
	}
	var names []string
	for _, de := range des {
		if de.Name() != layoutPin && (withLink || de.Name() != linkPin) {
			names = append(names, de.Name())
		}
	}
	names = append(names, layoutPin)
	var removed []string
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.Remove(path); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return removed, fmt.Errorf("xdpmaglev: removing a pin: %w", err)
		}
		removed = append(removed, path)
	}
	return removed, nil
}

// close releases the directory's lock, and whatever openPins opened that
// Load did not take over.
func (p *pinned) close() {
	p.closeMaps()
	if p.link != nil {
		_ = p.link.Close()
		p.link = nil
	}
	if p.lock != nil {
		_ = p.lock.Close()
		p.lock = nil
	}
}

// pinAll pins the LB's fresh maps, the layout record first, then writes
// the record: a directory whose record has no version is half made.
func (p *pinned) pinAll(maps map[string]*ebpf.Map, names []string) error {
	if err := maps[layoutPin].Pin(filepath.Join(p.dir, layoutPin)); err != nil {
		return fmt.Errorf("xdpmaglev: pinning %s: %w", layoutPin, err)
	}
	for _, name := range names {
		if name == layoutPin {
			continue
		}
		if err := maps[name].Pin(filepath.Join(p.dir, name)); err != nil {
			return fmt.Errorf("xdpmaglev: pinning %s: %w", name, err)
		}
	}
	return nil
}

// Release ends the LB's life in this process and leaves its data plane
// to the next: the program stays attached and keeps forwarding by the
// last tables, connection tracking goes on, and the maps and the link stay
// pinned in Options.PinPath, where a Load adopts them. The refresh of
// neighbours, the metrics and every file descriptor end, and the pin
// directory is free for the next LB; the LB's methods return ErrClosed
// from then on. Without Options.PinPath nothing would keep the program:
// Release then returns an error wrapping ErrOptions and changes nothing
// (Close the LB). Release after Close or Release returns nil.
func (lb *LB) Release() error {
	if lb.pins == nil {
		lb.mu.Lock()
		closed := lb.closed
		lb.mu.Unlock()
		if closed {
			return nil
		}
		return fmt.Errorf("%w: Release needs Options.PinPath: nothing else keeps the program attached (Close it)", ErrOptions)
	}
	return lb.shutdown(false)
}

// PinPath returns Options.PinPath: the directory of the LB's pins, or ""
// without them.
func (lb *LB) PinPath() string { return lb.opts.PinPath }

// Adopted reports whether Load adopted pinned maps (and so the services,
// backends, connection tracking and counters they held) rather than make
// new ones.
func (lb *LB) Adopted() bool { return lb.adopted }

// Detach removes what an LB left pinned in pinPath (Options.PinPath) by
// Release, or by ending without Close: it detaches the program from its
// interface, removes the link's and the maps' pins (the kernel frees each
// map once nothing holds it) and the directory, and returns the paths it
// removed. A pinPath that does not exist returns none and no error. It
// returns an error wrapping ErrInUse while an LB holds pinPath (its Close
// detaches), and ErrLayout for a directory that holds pins without a
// layout record, which are not xdpmaglev's and are left alone.
func Detach(pinPath string) ([]string, error) {
	if _, err := os.Stat(pinPath); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err := onBPFFS(pinPath); err != nil {
		return nil, err
	}
	lock, err := lockDir(pinPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = lock.Close() }()
	p := &pinned{dir: pinPath}
	names, err := p.entries()
	if err != nil {
		return nil, err
	}
	if len(names) > 0 && !slices.Contains(names, layoutPin) {
		return nil, fmt.Errorf("%w: %s holds %s and no layout record: not pins of xdpmaglev, left alone", ErrLayout, pinPath, strings.Join(names, ", "))
	}
	var removed []string
	if slices.Contains(names, linkPin) {
		path := filepath.Join(pinPath, linkPin)
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			return nil, fmt.Errorf("xdpmaglev: %s: the link: %w", pinPath, err)
		}
		if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			_ = l.Close()
			return nil, fmt.Errorf("xdpmaglev: detaching %s: %w", path, err)
		}
		err = l.Unpin()
		_ = l.Close()
		if err != nil {
			return nil, fmt.Errorf("xdpmaglev: removing %s: %w", path, err)
		}
		removed = append(removed, path)
	}
	rest, err := removePins(pinPath, true)
	removed = append(removed, rest...)
	if err != nil {
		return removed, err
	}
	if err := os.Remove(pinPath); err != nil {
		return removed, fmt.Errorf("xdpmaglev: removing PinPath: %w", err)
	}
	return removed, nil
}
