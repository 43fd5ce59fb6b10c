package config

import (
	"errors"
	"fmt"
	"os"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"go.yaml.in/yaml/v3"
)

// The configuration file (l4lb run -config) is YAML: the load balancer's
// settings at the top, and a list of services. Every key is a setting of
// the table, and means what the flag of the same name means (docs/l4lb-reference.md
// has the reference):
//
//	iface: eth0
//	seed: 7
//	admin: 127.0.0.1:9180
//	health: tcp              # a key of a service at the top: every service's default
//	services:
//	  - name: web
//	    vip: 203.0.113.1:80
//	    backends: [10.0.0.11, 10.0.0.12*2]
//	  - name: dns
//	    vip: 203.0.113.1:53
//	    proto: udp
//	    etcd: http://10.0.0.1:2379
//	    etcd-prefix: services/dns
//
// A value is parsed by its setting's parser (a scalar's text, each item of
// a list, or a mapping's fields), and the settings are built and checked
// by the code that builds a command line's, so the file and the flags
// accept the same values with the same errors; an error names the file,
// the line and the service.

// Load reads the configuration file at path: the load balancer's settings
// and its services. Its errors wrap ErrConfig and name the file, the line
// and the service: "bad configuration file: l4lb.yaml:14: service "web":
// -health-rise 0: at least 1".
func Load(path string) (Global, []Service, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Global{}, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	g, svcs, err := Parse(b)
	if err != nil {
		return Global{}, nil, fmt.Errorf("%w: %s:%w", ErrConfig, path, err)
	}
	g.File = path
	return g, svcs, nil
}

// lineError is an error at a line of the file.
func lineError(line int, format string, args ...any) error {
	return fmt.Errorf("%d: "+format, append([]any{line}, args...)...)
}

// keys are the settings that are keys of a file, by key.
var keys = func() map[string]*setting.Setting {
	m := map[string]*setting.Setting{}
	for _, s := range table {
		if !s.FlagOnly && s.Scope != setting.Decap {
			m[s.KeyName()] = s
		}
	}
	return m
}()

// top is the top of a file: the load balancer's settings, the defaults
// of the services' settings, and the services.
type top struct {
	vals     *setting.Values
	lines    map[*setting.Setting]int        // of the keys given
	defaults map[*setting.Setting]*yaml.Node // the services' settings given at the top
	services *yaml.Node
}

// Parse parses a configuration file's bytes; its errors start with the
// line.
func Parse(b []byte) (Global, []Service, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return Global{}, nil, syntaxError(b, err)
	}
	if len(doc.Content) == 0 {
		return Global{}, nil, errors.New("1: empty: a file lists services")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Global{}, nil, lineError(root.Line, "not a mapping of settings and services")
	}
	t, err := readTop(root)
	if err != nil {
		return Global{}, nil, err
	}
	g, err := buildGlobal(t.vals)
	if err != nil {
		return Global{}, nil, lineError(t.line(err, root.Line), "%v", err)
	}
	g.defaults, g.K8s.Kubeconfig = topDefaults(t)
	svcs, err := t.readServices(g)
	if err != nil {
		return Global{}, nil, err
	}
	for _, s := range svcs {
		if len(s.warnings) > 0 {
			for _, w := range s.warnings {
				g.Warnings = append(g.Warnings, fmt.Sprintf("service %q: %s", s.Name, w))
			}
		}
	}
	out := make([]Service, len(svcs))
	for i, s := range svcs {
		out[i] = s.Service
	}
	return g, out, nil
}

// line returns the line of the key of the setting err names, or def.
func (t *top) line(err error, def int) int {
	if l, ok := t.lines[setting.SettingOf(err)]; ok {
		return l
	}
	return def
}

// readTop reads the top's keys.
func readTop(root *yaml.Node) (*top, error) {
	t := &top{vals: &setting.Values{}, lines: map[*setting.Setting]int{}, defaults: map[*setting.Setting]*yaml.Node{}}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s := keys[k.Value]
		switch {
		case seen[k.Value]:
			return nil, lineError(k.Line, "%s given twice", k.Value)
		case k.Value == "services":
			t.services = v
		case s == nil:
			return nil, lineError(k.Line, "unknown key %q", k.Value)
		case s.Own:
			return nil, lineError(k.Line, "%s is a service's own: give it in the service, under services", k.Value)
		case s.Scope == setting.LB:
			if err := setValue(t.vals, s, k.Value, v); err != nil {
				return nil, err
			}
		default:
			t.defaults[s] = v
		}
		seen[k.Value] = true
		if s != nil {
			t.lines[s] = k.Line
		}
	}
	if t.services != nil && t.services.Kind == yaml.SequenceNode && len(t.services.Content) == 0 && t.vals.Given(vipPool.Setting) {
		return t, nil // the Kubernetes controller's services only
	}
	if t.services == nil && t.vals.Given(vipPool.Setting) {
		t.services = &yaml.Node{Kind: yaml.SequenceNode}
		return t, nil
	}
	if t.services == nil || t.services.Kind != yaml.SequenceNode || len(t.services.Content) == 0 {
		n := root
		if t.services != nil {
			n = t.services
		}
		return nil, lineError(n.Line, "services: a list of at least one service (or none, with vip-pool)")
	}
	return t, nil
}

// A valueError is an error in a value of the file, at a line.
type valueError struct {
	line int
	err  error
}

func (e *valueError) Error() string { return fmt.Sprintf("%d: %v", e.line, e.err) }

// valueErrorf returns a valueError at line.
func valueErrorf(line int, format string, args ...any) *valueError {
	return &valueError{line, fmt.Errorf(format, args...)}
}

// setValue sets the value of s, given as v under key: a scalar, a mapping
// of fields, or for a list, a sequence of those.
func setValue(vs *setting.Values, s *setting.Setting, key string, v *yaml.Node) *valueError {
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		if !s.List() {
			return valueErrorf(v.Line, "%s: one value, not a list", key)
		}
		items = v.Content
	}
	for _, n := range items {
		switch n.Kind {
		case yaml.ScalarNode:
			if err := vs.Set(s, n.Value); err != nil {
				return valueErrorf(n.Line, "%s %q: %v", key, n.Value, err)
			}
		case yaml.MappingNode:
			fields := map[string]string{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				fk, fv := n.Content[i], n.Content[i+1]
				if fv.Kind != yaml.ScalarNode {
					return valueErrorf(fv.Line, "%s: %s: one value", key, fk.Value)
				}
				fields[fk.Value] = fv.Value
			}
			if err := vs.SetFields(s, fields); err != nil {
				return valueErrorf(n.Line, "%s: %v", key, err)
			}
		default:
			return valueErrorf(n.Line, "%s: a value", key)
		}
	}
	return nil
}

// service is a service of the file, with its warnings.
type service struct {
	Service
	warnings []string
}

// readServices reads and builds the services, of the load balancer g:
// each name and each (VIP, port, protocol) once.
func (t *top) readServices(g Global) ([]service, error) {
	var out []service
	names := map[string]int{}
	svcKeys := map[string]string{} // the data plane's key of each service, to its name
	for _, sn := range t.services.Content {
		s, err := t.readService(sn, g)
		if err != nil {
			return nil, err
		}
		if l, dup := names[s.Name]; dup {
			return nil, lineError(sn.Line, "service %q: the name of the service at line %d too", s.Name, l)
		}
		names[s.Name] = sn.Line
		if other, dup := svcKeys[s.Svc.String()]; dup {
			return nil, lineError(sn.Line, "service %q: %v is service %q's too", s.Name, s.Svc, other)
		}
		svcKeys[s.Svc.String()] = s.Name
		out = append(out, s)
	}
	return out, nil
}

// readService reads one service's mapping, with the top's defaults, and
// builds it.
func (t *top) readService(sn *yaml.Node, g Global) (service, error) {
	if sn.Kind != yaml.MappingNode {
		return service{}, lineError(sn.Line, "a service is a mapping of its settings")
	}
	own, lines, err := serviceKeys(sn)
	if err != nil {
		return service{}, err
	}
	vs := &setting.Values{}
	nv := own[name.Setting]
	if nv == nil {
		return service{}, lineError(sn.Line, "a service needs a name")
	}
	if err := setValue(vs, name.Setting, "name", nv); err != nil {
		return service{}, err
	}
	svcName := name.Get(vs)
	for _, s := range table {
		v := own[s]
		if v == nil && t.defaults[s] != nil && t.applies(s, own) {
			v, lines[s] = t.defaults[s], t.lines[s]
		}
		if v == nil || s == name.Setting {
			continue
		}
		if err := setValue(vs, s, s.KeyName(), v); err != nil {
			return service{}, lineError(err.line, "service %q: %v", svcName, err.err)
		}
	}
	c, warnings, err := buildService(vs, g, svcName)
	if err != nil {
		line, at := sn.Line, setting.SettingOf(err)
		if l, ok := lines[at]; ok {
			line = l
		} else if l, ok := t.lines[at]; ok && at.Scope == setting.LB {
			line = l // the load balancer's, at the top: bgp-peer of the wrong family
		}
		return service{}, lineError(line, "service %q: %v", svcName, err)
	}
	return service{c, warnings}, nil
}

// serviceKeys returns a service's own settings and the lines of their
// keys: each once, none of the load balancer's.
func serviceKeys(sn *yaml.Node) (map[*setting.Setting]*yaml.Node, map[*setting.Setting]int, error) {
	own, lines := map[*setting.Setting]*yaml.Node{}, map[*setting.Setting]int{}
	for i := 0; i+1 < len(sn.Content); i += 2 {
		k, v := sn.Content[i], sn.Content[i+1]
		s := keys[k.Value]
		switch {
		case s == nil:
			return nil, nil, lineError(k.Line, "unknown key %q in a service", k.Value)
		case own[s] != nil:
			return nil, nil, lineError(k.Line, "%s given twice", k.Value)
		case s.Scope == setting.LB:
			return nil, nil, lineError(k.Line, "%s is the load balancer's, for every service: give it at the top", k.Value)
		}
		own[s], lines[s] = v, k.Line
	}
	return own, lines, nil
}

// applies reports whether the top's default of s applies to the service
// whose own settings are own: unless s.Needs names a setting the service
// lacks (given by neither the service nor the top, or with its default
// value), as the top's etcd URLs for a service with no etcd-prefix.
func (t *top) applies(s *setting.Setting, own map[*setting.Setting]*yaml.Node) bool {
	if s.Needs == "" {
		return true
	}
	needs := keys[s.Needs]
	v := own[needs]
	if v == nil {
		v = t.defaults[needs]
	}
	return v != nil && (v.Kind != yaml.ScalarNode || v.Value != needs.Default)
}
