package httpmaglev_test

import (
	"errors"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"github.com/maglevlb/maglev/httpmaglev"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestConfigErrors checks that each bad Config field gives an
// httpmaglev: error wrapping ErrInvalidConfig (and the root package's
// reason where there is one) that names the field.
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		field  string
		change func(*httpmaglev.Config)
		also   error
	}{
		{"TableSize", func(c *httpmaglev.Config) { c.TableSize = 65536 }, maglev.ErrSize},
		{"TableSize", func(c *httpmaglev.Config) { c.TableSize = -7 }, maglev.ErrSize},
		{"TableSize", func(c *httpmaglev.Config) { c.TableSize = maglev.MaxSize + 2 }, maglev.ErrSize},
		{"BalanceFactor", func(c *httpmaglev.Config) { c.BalanceFactor = 0.5 }, bounded.ErrBalanceFactor},
		{"BalanceFactor", func(c *httpmaglev.Config) { c.BalanceFactor = math.NaN() }, bounded.ErrBalanceFactor},
		{"BalanceFactor", func(c *httpmaglev.Config) { c.BalanceFactor = math.Inf(1) }, bounded.ErrBalanceFactor},
		{"HealthPath", func(c *httpmaglev.Config) { c.HealthPath = "healthz" }, nil},
		{"HealthInterval", func(c *httpmaglev.Config) { c.HealthInterval = -time.Second }, nil},
		{"HealthTimeout", func(c *httpmaglev.Config) { c.HealthTimeout = 2 * time.Second }, nil},
		{"HealthTimeout", func(c *httpmaglev.Config) { c.HealthTimeout = -1 }, nil},
		{"Fall", func(c *httpmaglev.Config) { c.Fall = -1 }, nil},
		{"Rise", func(c *httpmaglev.Config) { c.Rise = -2 }, nil},
		{"EjectAfter", func(c *httpmaglev.Config) { c.EjectAfter = -2 }, nil},
		{"EjectionTime", func(c *httpmaglev.Config) { c.EjectionTime = -1 }, nil},
		{"MaxRetryBody", func(c *httpmaglev.Config) { c.MaxRetryBody = -5 }, nil},
	}
	for _, tt := range tests {
		cfg := httpmaglev.Config{HealthPath: "/healthz"}
		tt.change(&cfg)
		tr, err := httpmaglev.NewTransport(cfg)
		if err == nil {
			_ = tr.Close()
			t.Errorf("%s: NewTransport succeeded, want an error", tt.field)
			continue
		}
		if !errors.Is(err, httpmaglev.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "httpmaglev: invalid config: "+tt.field+": ") {
			t.Errorf("%s: %v, want ErrInvalidConfig naming the field", tt.field, err)
		}
		if tt.also != nil && !errors.Is(err, tt.also) {
			t.Errorf("%s: %v, want it to wrap %v", tt.field, err, tt.also)
		}
		var ce *httpmaglev.ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("%s: %v, want a *ConfigError for the field", tt.field, err)
		}
	}
	// The zero Config, and one with no backends, are fine: every request
	// gets ErrNoHealthyBackend.
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, httpmaglev.ErrNoHealthyBackend) {
		t.Errorf("RoundTrip with no backends: %v, want ErrNoHealthyBackend", err)
	}
}

// TestSetBackendsErrors checks that each bad backend list gives an
// httpmaglev: error wrapping ErrInvalidBackends and its reason, from
// SetBackends (which keeps the previous membership) and NewTransport.
// TestBaseURL: the one-backend URL check accepts a base http(s) URL and
// reduces it to scheme and host, and rejects everything else with
// ErrBadURL, as SetBackends does.
func TestBaseURL(t *testing.T) {
	for _, raw := range []string{"http://10.0.0.1:8080", "https://users-a.internal", "http://[::1]:80/"} {
		u := mustURL(t, raw)
		got, err := httpmaglev.BaseURL(u)
		if err != nil || got.String() != strings.TrimSuffix(raw, "/") {
			t.Errorf("BaseURL(%s) = %v, %v; want %s", raw, got, err, strings.TrimSuffix(raw, "/"))
		}
	}
	for _, raw := range []string{"ftp://h:21", "http://", "http://u:p@h", "http://h/x", "http://h/%2F", "http://h?q", "http://h/?", "http://h#f", "mailto:x@h"} {
		if got, err := httpmaglev.BaseURL(mustURL(t, raw)); !errors.Is(err, httpmaglev.ErrBadURL) || got != nil {
			t.Errorf("BaseURL(%s) = %v, %v; want ErrBadURL", raw, got, err)
		}
		tr, err := httpmaglev.NewTransport(httpmaglev.Config{Backends: []httpmaglev.Backend{{URL: mustURL(t, raw), Name: "n"}}})
		if tr != nil {
			_ = tr.Close()
		}
		if !errors.Is(err, httpmaglev.ErrBadURL) {
			t.Errorf("NewTransport with %s: %v, want ErrBadURL as BaseURL", raw, err)
		}
	}
	if _, err := httpmaglev.BaseURL(nil); !errors.Is(err, httpmaglev.ErrBadURL) {
		t.Errorf("BaseURL(nil): %v, want ErrBadURL", err)
	}
}

func TestSetBackendsErrors(t *testing.T) {
	servers := startServers(t, 2)
	good := backendsOf(servers)
	tr := newTransport(t, httpmaglev.Config{}, servers)
	u := mustURL(t, "http://127.0.0.1:9")
	tests := []struct {
		name     string
		backends []httpmaglev.Backend
		reason   error
	}{
		{"nil URL", []httpmaglev.Backend{{Name: "a"}}, httpmaglev.ErrBadURL},
		{"no name, nil URL", []httpmaglev.Backend{{}}, maglev.ErrEmptyName},
		{"no name, no host", []httpmaglev.Backend{{URL: mustURL(t, "http:///x")}}, maglev.ErrEmptyName},
		{"relative URL", []httpmaglev.Backend{{Name: "a", URL: &url.URL{Path: "127.0.0.1:9"}}}, httpmaglev.ErrBadURL},
		{"ftp", []httpmaglev.Backend{{Name: "a", URL: mustURL(t, "ftp://127.0.0.1:9")}}, httpmaglev.ErrBadURL},
		{"path", []httpmaglev.Backend{{Name: "a", URL: mustURL(t, "http://127.0.0.1:9/api")}}, httpmaglev.ErrBadURL},
		{"query", []httpmaglev.Backend{{Name: "a", URL: mustURL(t, "http://127.0.0.1:9?x=1")}}, httpmaglev.ErrBadURL},
		{"user", []httpmaglev.Backend{{Name: "a", URL: mustURL(t, "http://u:p@127.0.0.1:9")}}, httpmaglev.ErrBadURL},
		{"duplicate name", []httpmaglev.Backend{{Name: "a", URL: u}, {Name: "a", URL: mustURL(t, "http://127.0.0.1:10")}}, maglev.ErrDuplicateName},
		{"duplicate host", []httpmaglev.Backend{{URL: u}, {URL: mustURL(t, "http://127.0.0.1:9/")}}, maglev.ErrDuplicateName},
		{"name equals a host", []httpmaglev.Backend{{URL: u}, {Name: "127.0.0.1:9", URL: mustURL(t, "http://127.0.0.1:10")}}, maglev.ErrDuplicateName},
	}
	before := tr.State()
	for _, tt := range tests {
		err := tr.SetBackends(tt.backends)
		if !errors.Is(err, httpmaglev.ErrInvalidBackends) || !errors.Is(err, tt.reason) || !strings.HasPrefix(err.Error(), "httpmaglev: invalid backends: ") {
			t.Errorf("%s: SetBackends: %v, want ErrInvalidBackends and %v", tt.name, err, tt.reason)
		}
		_, err = httpmaglev.NewTransport(httpmaglev.Config{Backends: tt.backends})
		if !errors.Is(err, httpmaglev.ErrInvalidBackends) || !errors.Is(err, tt.reason) {
			t.Errorf("%s: NewTransport: %v, want ErrInvalidBackends and %v", tt.name, err, tt.reason)
		}
	}
	after := tr.State()
	if after.Rebuilds != before.Rebuilds || len(after.Backends) != len(good) || after.Healthy != len(good) {
		t.Errorf("after bad SetBackends: %d rebuilds, %d backends, %d healthy; want %d, %d, %d",
			after.Rebuilds, len(after.Backends), after.Healthy, before.Rebuilds, len(good), len(good))
	}
	// The caller's slice is not kept or changed.
	list := []httpmaglev.Backend{{URL: mustURL(t, "http://127.0.0.1:9/")}}
	if err := tr.SetBackends(list); err != nil {
		t.Fatal(err)
	}
	if list[0].Name != "" || list[0].URL.Path != "/" {
		t.Errorf("SetBackends changed its argument: %+v", list[0])
	}
	if st := tr.State(); len(st.Backends) != 1 || st.Backends[0].Name != "127.0.0.1:9" || st.Backends[0].URL != "http://127.0.0.1:9" {
		t.Errorf("state after SetBackends of an unnamed backend: %+v", st.Backends)
	}
}
