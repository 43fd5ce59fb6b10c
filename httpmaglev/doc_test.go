package httpmaglev_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/internal/doccheck"
)

// TestStateDoc checks the State sample in docs/http.md against State, and
// that StateHandler serves a document of the same shape.
func TestStateDoc(t *testing.T) {
	blocks := doccheck.JSONBlocks(t, "../docs/http.md")
	if len(blocks) != 1 {
		t.Fatalf("docs/http.md has %d JSON samples, want 1", len(blocks))
	}
	doccheck.CheckSample(t, reflect.TypeFor[httpmaglev.State](), blocks[0])

	servers := startServers(t, 2)
	tr := newTransport(t, httpmaglev.Config{BalanceFactor: 1.25}, servers)
	rec := httptest.NewRecorder()
	tr.StateHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || ct != "application/json" {
		t.Errorf("StateHandler: %d, Content-Type %q", rec.Code, ct)
	}
	doccheck.CheckSample(t, reflect.TypeFor[httpmaglev.State](), rec.Body.String())
	rec = httptest.NewRecorder()
	tr.StateHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("StateHandler: POST got %d, want 405", rec.Code)
	}
}
