package ops

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"
)

// WriteJSON writes v as the reply, indented JSON with its content type.
// An error is the client gone, and is dropped.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// An Admin is a program's admin listener: its HTTP server on its own
// address, for /debug/maglev, /metrics and the like.
type Admin struct {
	ln  net.Listener
	srv *http.Server
}

// ServeAdmin listens on addr and serves h there until Close.
func ServeAdmin(addr string, h http.Handler) (*Admin, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	a := &Admin{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = a.srv.Serve(ln) }() // ends with Close
	return a, nil
}

// Addr returns the address the listener is on (with its port, if addr
// asked for port 0).
func (a *Admin) Addr() net.Addr { return a.ln.Addr() }

// Close stops the listener and waits, at most five seconds, for the
// requests under way.
func (a *Admin) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.srv.Shutdown(ctx)
}
