package httpmaglev

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestIdempotent(t *testing.T) {
	tests := []struct {
		method string
		header string // an idempotency header set to "k1", if any
		want   bool
	}{
		{http.MethodGet, "", true},
		{"", "", true}, // a client's empty method means GET
		{http.MethodHead, "", true},
		{http.MethodOptions, "", true},
		{http.MethodPut, "", true},
		{http.MethodDelete, "", true},
		{http.MethodTrace, "", true},
		{http.MethodPost, "", false},
		{http.MethodPatch, "", false},
		{http.MethodConnect, "", false},
		{"PURGE", "", false},
		{http.MethodPost, "Idempotency-Key", true},
		{http.MethodPatch, "Idempotency-Key", true},
		{http.MethodPost, "X-Idempotency-Key", true},
		{http.MethodPost, "X-Request-Id", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Method = tt.method
		if tt.header != "" {
			r.Header.Set(tt.header, "k1")
		}
		if got := idempotent(r); got != tt.want {
			t.Errorf("idempotent(%q with %q) = %t, want %t", tt.method, tt.header, got, tt.want)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Idempotency-Key", "")
	if idempotent(r) {
		t.Error("POST with an empty Idempotency-Key is idempotent, want not")
	}
}
