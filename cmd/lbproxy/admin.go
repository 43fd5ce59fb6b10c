package main

import (
	"net/http"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/httpmaglev"
)

// debugState is the JSON document /debug/maglev serves: the Transport's
// state, and the -key flag.
type debugState struct {
	httpmaglev.State
	Key string `json:"key"` // the -key flag
}

// state returns the proxy's current routing state.
func (p *proxy) state() debugState {
	return debugState{State: p.t.State(), Key: p.cfg.Key}
}

// adminHandler serves the admin endpoints: /debug/maglev, the routing state
// as JSON, and /metrics, the Transport's metrics in Prometheus's text
// format (see docs/metrics.md).
func (p *proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.metrics.Handler)
	mux.HandleFunc("GET /debug/maglev", func(w http.ResponseWriter, r *http.Request) { ops.WriteJSON(w, p.state()) })
	return mux
}
