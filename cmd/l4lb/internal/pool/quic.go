package pool

import (
	"bytes"
	"maps"
	"net/netip"
	"slices"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// quicPlan is a pool's QUIC-LB: the configuration in force, and the
// earlier ones a rotation keeps decoding, each with the server IDs of the
// backends when it was in force (the IDs of its connections carry those).
// An earlier configuration stays until a later one takes its codepoint,
// quic-lb goes off, or l4lb restarts (docs/quic.md, "Key rotation").
type quicPlan struct {
	cur  *config.QUIC           // nil: quic-lb off
	prev []xdpmaglev.QUICConfig // by codepoint, none of cur's
}

// sameConfig reports whether two configurations are the same.
func sameConfig(a, b quiclb.Config) bool {
	return a.ID == b.ID && a.ServerIDLen == b.ServerIDLen && a.NonceLen == b.NonceLen && a.EncodeLength == b.EncodeLength && bytes.Equal(a.Key, b.Key)
}

// reconfigure takes next, the configuration a reload gives (nil: off):
// a configuration of another codepoint becomes the one in force, and the
// one in force before keeps decoding, with the server IDs ids gives its
// backends now; one of the same codepoint (another key or lengths)
// replaces it, the earlier IDs of that codepoint decoding no more (it
// returns true then, for a warning).
func (q *quicPlan) reconfigure(next *config.QUIC, ids map[netip.Addr]quiclb.ServerID) (inPlace bool) {
	if next == nil {
		q.cur, q.prev = nil, nil
		return false
	}
	if q.cur != nil && !sameConfig(q.cur.Config, next.Config) {
		if q.cur.Config.ID != next.Config.ID {
			q.prev = slices.DeleteFunc(q.prev, func(c xdpmaglev.QUICConfig) bool { return c.ID == q.cur.Config.ID })
			q.prev = append(q.prev, xdpmaglev.QUICConfig{Config: q.cur.Config, ServerIDs: maps.Clone(ids)})
		} else {
			inPlace = true
		}
	}
	q.prev = slices.DeleteFunc(q.prev, func(c xdpmaglev.QUICConfig) bool { return c.ID == next.Config.ID })
	q.cur = next
	return inPlace
}

// options returns the data plane's QUIC-LB of the backends bs: the
// configuration in force, with each backend's server ID of ids, and the
// earlier ones, with their backends still in bs. nil with quic-lb off.
func (q *quicPlan) options(bs []xdpmaglev.Backend, ids map[netip.Addr]quiclb.ServerID) *xdpmaglev.QUIC {
	if q.cur == nil {
		return nil
	}
	in := map[netip.Addr]bool{}
	for _, b := range bs {
		in[b.Addr] = true
	}
	keep := func(m map[netip.Addr]quiclb.ServerID, n int) map[netip.Addr]quiclb.ServerID {
		out := map[netip.Addr]quiclb.ServerID{}
		for a, id := range m {
			if in[a] && id.Len() == n {
				out[a] = id
			}
		}
		return out
	}
	out := &xdpmaglev.QUIC{Configs: []xdpmaglev.QUICConfig{{Config: q.cur.Config, ServerIDs: keep(ids, q.cur.Config.ServerIDLen)}}}
	for _, c := range q.prev {
		out.Configs = append(out.Configs, xdpmaglev.QUICConfig{Config: c.Config, ServerIDs: keep(c.ServerIDs, c.ServerIDLen)})
	}
	return out
}

// sameOptions reports whether two services' options are the same, their
// QUIC-LB configurations and server IDs compared by value.
func sameOptions(a, b xdpmaglev.ServiceOptions) bool {
	qa, qb := a.QUIC, b.QUIC
	a.QUIC, b.QUIC = nil, nil
	if a != b || (qa == nil) != (qb == nil) {
		return false
	}
	if qa == nil {
		return true
	}
	return slices.EqualFunc(qa.Configs, qb.Configs, func(x, y xdpmaglev.QUICConfig) bool {
		return sameConfig(x.Config, y.Config) && maps.Equal(x.ServerIDs, y.ServerIDs)
	})
}

// QUICStatus is a QUIC-LB configuration of a service, as the admin API
// shows it: never its key.
type QUICStatus struct {
	ID          uint8  `json:"config_id"`
	ServerIDLen int    `json:"server_id_length"`
	NonceLen    int    `json:"nonce_length"`
	Mode        string `json:"mode"`               // plaintext, single-pass or four-pass
	InForce     bool   `json:"in_force"`           // the one the servers issue IDs under; the others decode a rotation's earlier IDs
	KeyFile     string `json:"key_file,omitempty"` // the configuration in force's
	ServerIDs   int    `json:"server_ids"`         // the backends it routes to by server ID
}

// quicStatus returns the pool's QUIC-LB configurations, the one in force
// first. p.mu is held.
func (p *Pool) quicStatus() []QUICStatus {
	if p.quic.cur == nil {
		return nil
	}
	q := p.quic.options(p.applied, p.serverIDs())
	var out []QUICStatus
	for i, c := range q.Configs {
		s := QUICStatus{ID: c.ID, ServerIDLen: c.ServerIDLen, NonceLen: c.NonceLen, Mode: c.Mode().String(), InForce: i == 0, ServerIDs: len(c.ServerIDs)}
		if i == 0 {
			s.KeyFile = p.quic.cur.KeyFile
		}
		out = append(out, s)
	}
	return out
}

// serverIDs returns each backend's server ID: the members' and, for a
// backend that left them and is draining, the last one it had. p.mu is
// held.
func (p *Pool) serverIDs() map[netip.Addr]quiclb.ServerID {
	out := maps.Clone(p.lastIDs)
	for a, m := range p.members {
		if m.ServerID.Len() > 0 {
			out[a] = m.ServerID
		} else {
			delete(out, a)
		}
	}
	return out
}

// appliedIDs returns the server IDs of the backends the data plane holds:
// those the configuration in force routes to. p.mu is held.
func (p *Pool) appliedIDs() map[netip.Addr]quiclb.ServerID {
	ids := p.serverIDs()
	out := map[netip.Addr]quiclb.ServerID{}
	for _, b := range p.applied {
		if id, ok := ids[b.Addr]; ok {
			out[b.Addr] = id
		}
	}
	return out
}
