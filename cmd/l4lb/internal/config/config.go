// Package config is l4lb's configuration: its settings, each declared once
// (settings.go: flag, file key, scope, type, default, whether a reload may
// change it, doc), the command lines of l4lb run, decap and detach that
// set them, and the configuration file (YAML) of many services. A command
// line and a file go through one code path: their settings are parsed
// into a setting.Values, from which Global (the load balancer's own),
// Service (one service's) and Decap are built and checked; an error is a
// setting.Error of the setting at fault, so a file's error names the line
// that gave it. SameGlobal is what a reload may not change. The table of
// docs/l4lb-reference.md's "Settings" is setting.Table(Settings()), which
// TestDocsTable keeps in step.
//
// It holds no lock and starts nothing: everything it returns is a value.
package config

//go:generate go test -run ^TestDocsTable$ -write

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.yaml.in/yaml/v3"
)

// Global are the settings of the whole load balancer.
type Global struct {
	Iface     string
	Opts      xdpmaglev.Options // Mode, Seed, FloodRate, ConntrackSize, MaxServices, MaxBackends
	Admin     string            // the admin address; "": none
	BGP       bgp.Config        // bgp-asn and bgp-*: ASN 0 for no BGP
	Pin       Pin               // pin-dir, -rebuild
	File      string            // the configuration file the services come from; "" for the flags' one service
	LogFormat string            // text or json
	Handoff   Handoff           // state-file, handoff-listen, handoff-peers
	K8s       K8s               // the Kubernetes controller: vip-pool, k8s-*, the file's kubeconfig
	Warnings  []string          // logged at start: legal, but likely not what the operator meant

	vals *setting.Values // the settings given, for SameGlobal
	// defaults are the services' settings given at the top of the file,
	// for the Kubernetes Services' (K8sService).
	defaults map[*setting.Setting]*yaml.Node
}

// Handoff is where l4lb keeps its services' tables and second hops
// (xdpmaglev.Handoff) for the next l4lb, and shares them with the fleet.
type Handoff struct {
	StateFile string   // state-file, cleaned; "": none
	Listen    string   // handoff-listen: the peer listener's address; "": none
	Peers     []string // handoff-peers: the others' listeners, HOST:PORT, asked at start
}

// Pin is where the data plane is pinned so that it outlives l4lb
// (xdpmaglev.Options.PinPath), one directory per interface.
type Pin struct {
	Dir      string // pin-dir, cleaned; "": nothing pinned
	Explicit bool   // pin-dir given: a directory outside a BPF filesystem is an error, not a warning
	Rebuild  bool   // -rebuild
}

// Service is one service: where its backends come from, how its packets
// reach them, and how they are checked.
type Service struct {
	Name     string // in the configuration file; "default" for the flags' one service
	Svc      xdpmaglev.Service
	Backends []xdpmaglev.Backend
	Src      *ops.Sources // etcd, dns, k8s-service...: where the backends come from, if not backends
	Drained  []netip.Addr // drain
	Timeout  time.Duration
	Fwd      xdpmaglev.ServiceOptions // forward, encap-src, gue-port, m, second-chance(-window), conntrack
	QUIC     *QUIC                    // quic-lb and quic-lb-*: nil for off
	Health   checker.Config           // health and health-*
	// Settings are the service's settings given, as text: two services of
	// the same Settings are the same; SrcSettings those of its membership
	// source.
	Settings, SrcSettings string
}

// QUIC is a service's QUIC-LB: the configuration its servers issue
// connection IDs under, and the server IDs of the backends the
// configuration gives (a membership source's come with its endpoints).
type QUIC struct {
	Config    quiclb.Config                  // quic-lb-config-id, -server-id-length, -nonce-length; the key of -key-file
	KeyFile   string                         // quic-lb-key-file; "": plaintext
	ServerIDs map[netip.Addr]quiclb.ServerID // the backends' server-id
}

// ServerIDs returns the QUIC-LB server IDs of the backends given, by
// address; nil with quic-lb off.
func (s Service) ServerIDs() map[netip.Addr]quiclb.ServerID {
	if s.QUIC == nil {
		return nil
	}
	return s.QUIC.ServerIDs
}

// Err returns err of the service s: "service NAME: err", or err for the
// flags' one service.
func (s Service) Err(err error) error {
	if s.Name == "default" {
		return err
	}
	return fmt.Errorf("service %q: %w", s.Name, err)
}

// ErrConfig is wrapped by every error of Load and SameGlobal.
var ErrConfig = errors.New("bad configuration file")

// SameGlobal returns an error naming the first of the load balancer's own
// settings (those a reload may not change) that differs between the
// running configuration a and the file read again, b: those take a
// restart.
func SameGlobal(a, b Global) error {
	for _, s := range table {
		if s.Scope != setting.LB || s.FlagOnly || s.Reload {
			continue
		}
		if x, y := format(a.vals, s), format(b.vals, s); x != y {
			return fmt.Errorf("%w: %s: %v, running with %v: the load balancer's own settings take a restart", ErrConfig, s.KeyName(), y, x)
		}
	}
	return nil
}

// format is vs.Format(s), a nil vs holding no value.
func format(vs *setting.Values, s *setting.Setting) string {
	if vs == nil {
		vs = &setting.Values{}
	}
	return vs.Format(s)
}

// Summary says what a configuration of g and svcs holds, as l4lb check
// prints it: "2 services (dns, web) on eth0", and with vip-pool ", and
// the Services of class CLASS from [PREFIXES]" before "on".
func Summary(g Global, svcs []Service) string {
	names := make([]string, len(svcs))
	for i, s := range svcs {
		names[i] = s.Name
	}
	slices.Sort(names)
	out := ops.Count(len(svcs), "service")
	if len(names) > 0 {
		out += " (" + strings.Join(names, ", ") + ")"
	}
	if g.K8s.On() {
		out += fmt.Sprintf(", and the Services of class %s from %v", g.K8s.Class, g.K8s.Pool)
	}
	return out + " on " + g.Iface
}
