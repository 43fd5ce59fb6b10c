package k8slb

import (
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
	corev1 "k8s.io/api/core/v1"
)

func svcAt(name, vip, settings string) config.Service {
	return config.Service{Name: name, Svc: xdpmaglev.Service{VIP: netip.MustParseAddrPort(vip), Proto: xdpmaglev.TCP}, Settings: settings}
}

func namesOf(svcs []config.Service) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.Name)
	}
	return out
}

// TestMerge: the file's services first; a Service's at the address of
// one of the file's is left out.
func TestMerge(t *testing.T) {
	file := []config.Service{svcAt("web", "198.19.0.1:80", "a")}
	k8s := []config.Service{svcAt("k8s/ns/a/http", "198.19.0.1:80", "b"), svcAt("k8s/ns/b/http", "198.19.0.2:80", "c")}
	if got := namesOf(Merge(file, k8s, slog.New(slog.DiscardHandler))); !slices.Equal(got, []string{"web", "k8s/ns/b/http"}) {
		t.Errorf("Merge: %v", got)
	}
}

// TestApplyEach: services the balancer refuses together are applied one
// by one, those it refuses alone left out, and those it took before kept.
func TestApplyEach(t *testing.T) {
	var calls [][]string
	c := New(Options{Apply: func(svcs []config.Service) error {
		calls = append(calls, namesOf(svcs))
		if slices.ContainsFunc(svcs, func(s config.Service) bool { return s.Name == "bad" }) {
			return errors.New("refused")
		}
		return nil
	}})
	c.refusals = map[string]bool{}
	c.last = []config.Service{svcAt("kept", "198.19.0.1:80", "x"), svcAt("changed", "198.19.0.2:80", "x")}
	out := []config.Service{svcAt("bad", "198.19.0.3:80", "x"), svcAt("changed", "198.19.0.2:80", "y"), svcAt("kept", "198.19.0.1:80", "x"), svcAt("new", "198.19.0.4:80", "x")}
	svc := &corev1.Service{}
	of := map[string]*corev1.Service{"bad": svc, "changed": svc, "kept": svc, "new": svc}
	got := c.applyEach(out, of, nil)
	if !slices.Equal(namesOf(got), []string{"changed", "kept", "new"}) {
		t.Errorf("applied %v, want changed, kept, new", namesOf(got))
	}
	want := [][]string{{"kept"}, {"kept", "bad"}, {"kept", "changed"}, {"kept", "changed", "new"}}
	if !slices.EqualFunc(calls, want, slices.Equal[[]string]) {
		t.Errorf("Apply's calls: %v, want %v", calls, want)
	}
	if len(c.refusals) != 1 {
		t.Errorf("refusals: %v, want bad's", c.refusals)
	}
}
