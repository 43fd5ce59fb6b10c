package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The configuration file (-config) is YAML: the load balancer's settings
// at the top, and a list of services. Every key is the flag of the same
// name, and means what the flag means (docs/l4lb.md has the reference):
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
// Each service is checked as the flags of its keys and the top's would be
// on a command line, so the file and the flags accept the same values with
// the same errors; an error names the file, the line and the service.

// ErrConfig is wrapped by every error of loadFile.
var ErrConfig = errors.New("bad configuration file")

// globalKeys are the top-level keys that are the load balancer's own.
var globalKeys = []string{"iface", "mode", "seed", "flood-rate", "admin", "conntrack-size", "max-services", "max-backends", "pin-dir", "log-format",
	"bgp-asn", "bgp-router-id", "bgp-peer", "bgp-listen-port", "bgp-hold", "bgp-restart-time", "bgp-drain"}

// serviceKeys are the keys of a service, besides name. Those not in
// serviceOnly may be given at the top too, as every service's default.
var serviceKeys = []string{"vip", "proto", "backends", "m", "forward", "encap-src", "gue-port", "drain", "drain-timeout",
	"health", "health-path", "health-status", "health-port", "health-interval", "health-timeout", "health-rise", "health-fall",
	"etcd", "etcd-prefix", "dns", "dns-interval", "k8s-service", "kubeconfig"}

// serviceOnly are the service keys that are each service's own.
var serviceOnly = []string{"vip", "backends", "drain", "etcd-prefix", "dns", "k8s-service"}

// sourceKeys are the keys of the membership sources, and the key a
// default of one given at the top needs in the service to apply: the top's
// etcd URLs serve the services with an etcd-prefix.
var sourceKeys = map[string]string{"etcd": "etcd-prefix", "etcd-prefix": "", "dns": "", "dns-interval": "dns", "k8s-service": "", "kubeconfig": "k8s-service"}

// listKeys are the keys whose value may be a list, each item one flag.
var listKeys = []string{"backends", "drain", "etcd", "bgp-peer"}

// flagOf is the flag of a key where the two differ.
var flagOf = map[string]string{"backends": "backend"}

// serviceName is what a service's name may be: it names the service in
// the admin API and in errors.
var serviceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// loadFile reads the configuration file at path: the load balancer's
// settings and its services, each checked as parse checks flags. Its
// errors wrap ErrConfig and name the file, the line and the service.
func loadFile(path string) (global, []serviceConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return global{}, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	g, svcs, err := parseFile(b)
	if err != nil {
		return global{}, nil, fmt.Errorf("%w: %s:%w", ErrConfig, path, err)
	}
	g.file = path
	return g, svcs, nil
}

// lineError is an error at a line of the file.
func lineError(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%d: "+format, append([]any{n.Line}, args...)...)
}

// parseFile parses a configuration file's bytes; its errors start with
// the line.
func parseFile(b []byte) (global, []serviceConfig, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return global{}, nil, syntaxError(b, err)
	}
	if len(doc.Content) == 0 {
		return global{}, nil, errors.New("1: empty: a file lists services")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return global{}, nil, lineError(root, "not a mapping of settings and services")
	}
	var top []string // flags of the global keys
	defaults := map[string]*yaml.Node{}
	keyLines := map[string]int{} // of the top's keys
	var services *yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case seen[k.Value]:
			return global{}, nil, lineError(k, "%s given twice", k.Value)
		case k.Value == "services":
			services = v
		case slices.Contains(globalKeys, k.Value):
			keyLines[k.Value] = k.Line
			args, err := flagsOf(k.Value, v)
			if err != nil {
				return global{}, nil, err
			}
			top = append(top, args...)
		case slices.Contains(serviceKeys, k.Value) && !slices.Contains(serviceOnly, k.Value):
			keyLines[k.Value] = k.Line
			defaults[k.Value] = v
		case slices.Contains(serviceKeys, k.Value) || k.Value == "name":
			return global{}, nil, lineError(k, "%s is a service's own: give it in the service, under services", k.Value)
		default:
			return global{}, nil, lineError(k, "unknown key %q", k.Value)
		}
		seen[k.Value] = true
	}
	if services == nil || services.Kind != yaml.SequenceNode || len(services.Content) == 0 {
		n := root
		if services != nil {
			n = services
		}
		return global{}, nil, lineError(n, "services: a list of at least one service")
	}
	var g global
	var out []serviceConfig
	names := map[string]int{}
	keys := map[string]string{} // the data plane's key of each service, to its name
	for _, sn := range services.Content {
		c, err := parseService(sn, top, defaults, keyLines)
		if err != nil {
			return global{}, nil, err
		}
		if l, dup := names[c.name]; dup {
			return global{}, nil, lineError(sn, "service %q: the name of the service at line %d too", c.name, l)
		}
		names[c.name] = sn.Line
		if other, dup := keys[c.svc.String()]; dup {
			return global{}, nil, lineError(sn, "service %q: %v is service %q's too", c.name, c.svc, other)
		}
		keys[c.svc.String()] = c.name
		if len(out) == 0 {
			g = c.global
		}
		for _, w := range c.warnings {
			g.warnings = append(g.warnings, fmt.Sprintf("service %q: %s", c.name, w))
		}
		out = append(out, c.serviceConfig)
	}
	return g, out, nil
}

// syntaxError returns the error yaml.v3 found in the file b, which is not
// YAML, as "LINE: problem", LINE the line that has the problem.
//
// yaml.v3 says "line N: problem", N the line of the problem's context (the
// collection or scalar being read, which may start lines before), counted
// from 1 for the scanner's problems (a character that cannot start a
// token, a tab) but from 0 for the parser's (its fail reports
// yaml_parser_t's mark without adding 1): for those, listed in
// parserProblems, the context's line is N+1. The problem is at that line
// or after it: the first line such that the file up to it has the same
// problem. It costs a parse of the file's first lines for each line from
// the context's to the problem's, and only when the file is not YAML.
func syntaxError(b []byte, err error) error {
	line, problem := yamlLine(err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	for k := max(line, 1); k <= len(lines); k++ {
		var n yaml.Node
		if err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n); err != nil {
			if _, p := yamlLine(err); p == problem {
				line = k
				break
			}
		}
	}
	return fmt.Errorf("%d: %s", max(line, 1), problem)
}

// yamlLine returns the line of yaml.v3's error err, counted from 1 (0 if
// it names none), and its problem.
func yamlLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	l, problem, ok := strings.Cut(strings.TrimPrefix(msg, "line "), ": ")
	n, nerr := strconv.Atoi(l)
	if !ok || !strings.HasPrefix(msg, "line ") || nerr != nil {
		return 0, msg
	}
	if slices.Contains(parserProblems, problem) {
		n++
	}
	return n, problem
}

// parserProblems are the problems yaml.v3's parser (parserc.go) reports,
// whose line it counts from 0; its scanner's, counted from 1, are others.
var parserProblems = []string{
	"did not find expected <stream-start>", "did not find expected <document start>", "did not find expected node content",
	"did not find expected key", "did not find expected '-' indicator", "did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"found duplicate %YAML directive", "found incompatible YAML document", "found duplicate %TAG directive", "found undefined tag handle",
}

// parseService parses one service's mapping with the global flags top and
// the defaults of the top level, whose keys are at lines.
func parseService(sn *yaml.Node, top []string, defaults map[string]*yaml.Node, lines map[string]int) (config, error) {
	if sn.Kind != yaml.MappingNode {
		return config{}, lineError(sn, "a service is a mapping of its settings")
	}
	own := map[string]*yaml.Node{}
	var name string
	for i := 0; i+1 < len(sn.Content); i += 2 {
		k, v := sn.Content[i], sn.Content[i+1]
		switch {
		case own[k.Value] != nil || (k.Value == "name" && name != ""):
			return config{}, lineError(k, "%s given twice", k.Value)
		case k.Value == "name":
			if v.Kind != yaml.ScalarNode || !serviceName.MatchString(v.Value) {
				return config{}, lineError(v, "name %q: letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit", v.Value)
			}
			name = v.Value
		case slices.Contains(serviceKeys, k.Value):
			own[k.Value] = v
			lines = maps.Clone(lines)
			lines[k.Value] = k.Line
		case slices.Contains(globalKeys, k.Value):
			return config{}, lineError(k, "%s is the load balancer's, for every service: give it at the top", k.Value)
		default:
			return config{}, lineError(k, "unknown key %q in a service", k.Value)
		}
	}
	if name == "" {
		return config{}, lineError(sn, "a service needs a name")
	}
	args := slices.Clone(top)
	var src []string
	checked := true // by a health check: the top's health-* keys apply
	if h := own["health"]; h != nil {
		checked = h.Value != "none"
	} else if h := defaults["health"]; h == nil || h.Value == "none" {
		checked = false
	}
	for _, key := range serviceKeys {
		v := own[key]
		if v == nil {
			v = defaults[key]
			if need, ok := sourceKeys[key]; ok && v != nil && (need == "" || own[need] == nil) {
				v = nil // a source's default, for services of that source only
			}
			if strings.HasPrefix(key, "health-") && !checked {
				v = nil // the top's, for services with a health check only
			}
		}
		if v == nil {
			continue
		}
		a, err := flagsOf(key, v)
		if err != nil {
			return config{}, fmt.Errorf("%w (service %q)", err, name)
		}
		args = append(args, a...)
		if _, ok := sourceKeys[key]; ok {
			src = append(src, a...)
		}
	}
	c, err := parse(args, io.Discard)
	if err != nil {
		at := sn.Line
		if l, ok := lines[keyOf(err.Error())]; ok {
			at = l
		}
		return config{}, fmt.Errorf("%d: service %q: %v", at, name, err)
	}
	c.name = name
	c.settings, c.srcSettings = strings.Join(args, "\x00"), strings.Join(src, "\x00")
	return c, nil
}

// keyOf returns the key whose flag an error of parse names first, or "".
func keyOf(msg string) string {
	best, at := "", len(msg)
	for _, key := range append(slices.Clone(serviceKeys), globalKeys...) {
		flag := "-" + key
		if f, ok := flagOf[key]; ok {
			flag = "-" + f
		}
		for i := 0; i < len(msg); {
			j := strings.Index(msg[i:], flag)
			if j < 0 {
				break
			}
			j += i
			end := j + len(flag)
			if end == len(msg) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz-", rune(msg[end])) {
				if j < at {
					best, at = key, j
				}
				break
			}
			i = end
		}
	}
	return best
}

// flagsOf returns the flags of key's value: one for a scalar, one per
// item for a list key. A backend may be a mapping {addr, mac, weight}, and
// a BGP peer {addr, asn}.
func flagsOf(key string, v *yaml.Node) ([]string, error) {
	flag := "-" + key
	if f, ok := flagOf[key]; ok {
		flag = "-" + f
	}
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		if !slices.Contains(listKeys, key) {
			return nil, lineError(v, "%s: one value, not a list", key)
		}
		items = v.Content
	}
	var out []string
	for _, it := range items {
		s, err := scalarOf(key, it)
		if err != nil {
			return nil, err
		}
		out = append(out, flag+"="+s)
	}
	return out, nil
}

// scalarOf returns the flag value of one item.
func scalarOf(key string, n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.MappingNode:
		fields := map[string]string{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return "", lineError(v, "%s: %s: one value", key, k.Value)
			}
			fields[k.Value] = v.Value
		}
		var allowed []string
		var s string
		switch key {
		case "backends":
			allowed = []string{"addr", "mac", "weight"}
			s = fields["addr"]
			if m, ok := fields["mac"]; ok {
				s += "=" + m
			}
			if w, ok := fields["weight"]; ok {
				s += "*" + w
			}
		case "bgp-peer":
			allowed = []string{"addr", "asn"}
			s = fields["addr"] + "," + fields["asn"]
		default:
			return "", lineError(n, "%s: a value, not a mapping", key)
		}
		for k := range fields {
			if !slices.Contains(allowed, k) {
				return "", lineError(n, "%s: unknown key %q (%s)", key, k, strings.Join(allowed, ", "))
			}
		}
		if fields["addr"] == "" {
			return "", lineError(n, "%s: needs addr", key)
		}
		return s, nil
	}
	return "", lineError(n, "%s: a value", key)
}
