package main

import (
	"strings"
	"testing"
)

func TestParseFlagsMembership(t *testing.T) {
	good := []struct {
		args []string
		want func(options) bool
	}{
		{[]string{"-etcd", "http://127.0.0.1:2379,http://127.0.0.2:2379", "-etcd-prefix", "services/web"}, func(o options) bool {
			return o.src.String() == "etcd prefix services/web" && o.cfg.Dynamic && len(o.cfg.Backends) == 0
		}},
		{[]string{"-dns", "web.test:8080"}, func(o options) bool {
			return o.src.String() == "DNS web.test:8080" && o.cfg.Dynamic
		}},
		{[]string{"-dns-srv", "_http._tcp.web.test", "-dns-interval", "250ms"}, func(o options) bool {
			return o.src.String() == "DNS SRV _http._tcp.web.test" && o.cfg.Dynamic
		}},
		{[]string{"-k8s-service", "prod/web:http", "-kubeconfig", "kc"}, func(o options) bool {
			return o.src.String() == "Kubernetes service prod/web:http" && o.cfg.Dynamic
		}},
	}
	for _, tt := range good {
		o, err := parseFlags(tt.args)
		if err != nil || !tt.want(o) {
			t.Errorf("parseFlags(%q) = %+v, %v", tt.args, o, err)
		}
	}
	bad := []struct {
		args []string
		msg  string // part of the error
	}{
		{[]string{"-etcd", "http://127.0.0.1:2379"}, "-etcd needs -etcd-prefix"},
		{[]string{"-etcd", "http://127.0.0.1:2379", "-etcd-prefix", "/"}, "-etcd needs -etcd-prefix"},
		{[]string{"-etcd-prefix", "services/web", "-demo", "2"}, "-etcd-prefix needs -etcd"},
		{[]string{"-etcd", "http://127.0.0.1:2379", "-etcd-prefix", "p", "-backend", "http://127.0.0.1:9001"}, "cannot be used with -backend"},
		{[]string{"-etcd", "http://127.0.0.1:2379", "-etcd-prefix", "p", "-demo", "2"}, "cannot be used with -backend"},
		{[]string{"-dns", "web.test:80", "-backend", "http://127.0.0.1:9001"}, "cannot be used with -backend"},
		{[]string{"-dns-srv", "_http._tcp.web.test", "-demo", "1"}, "cannot be used with -backend"},
		{[]string{"-dns", "web.test:80", "-dns-srv", "_http._tcp.web.test"}, "use one source"},
		{[]string{"-etcd", "http://127.0.0.1:2379", "-etcd-prefix", "p", "-dns", "web.test:80"}, "use one source"},
		{[]string{"-dns", "web.test"}, "want NAME:PORT"},
		{[]string{"-dns", ":80"}, "want NAME:PORT"},
		{[]string{"-dns", "web.test:80", "-dns-interval", "0s"}, "-dns-interval must be positive"},
		{[]string{"-k8s-service", "prod/web:http", "-dns", "web.test:80"}, "use one source"},
		{[]string{"-k8s-service", "prod/web:http", "-demo", "1"}, "cannot be used with -backend"},
		{[]string{"-k8s-service", "web:http"}, "-k8s-service: k8smaglev: invalid config"},
		{[]string{"-kubeconfig", "kc", "-demo", "1"}, "-kubeconfig needs -k8s-service"},
	}
	for _, tt := range bad {
		_, err := parseFlags(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), "lbproxy: ") {
			t.Errorf("parseFlags(%q): %v, want an error saying %q", tt.args, err, tt.msg)
		}
	}
}

// TestHelpDNSSRV: lbproxy -h lists every membership source, -dns-srv
// included (l4lb, which needs addresses, does not take it).
func TestHelpDNSSRV(t *testing.T) {
	help := helpText(t)
	for _, f := range []string{"\n  -etcd ", "\n  -dns ", "\n  -dns-srv ", "\n  -k8s-service "} {
		if !strings.Contains(help, f) {
			t.Errorf("-h lacks %q:\n%s", strings.TrimSpace(f), help)
		}
	}
}
