package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// A demoBackend is a toy backend for -demo and the tests. It answers every
// request with its id (in the body and an X-Backend header) and the size of
// the request body, and its health path with 200, or 503 while it is down.
// GET /down and /up switch its health; /stop, where stop is set, shuts it
// down for good.
type demoBackend struct {
	id         string
	healthPath string
	down       atomic.Bool
	stop       func()       // shuts the backend's server down; nil in tests
	served     atomic.Int64 // requests answered, health checks and switches aside
}

func (d *demoBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == d.healthPath:
		if d.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	case r.URL.Path == "/down" || r.URL.Path == "/up":
		d.down.Store(r.URL.Path == "/down")
		_, _ = fmt.Fprintf(w, "%s: health check now answers %s\n", d.id, map[bool]string{true: "503", false: "200"}[d.down.Load()])
	case r.URL.Path == "/stop" && d.stop != nil:
		_, _ = fmt.Fprintf(w, "%s: stopping\n", d.id)
		go d.stop()
	default:
		d.served.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Backend", d.id)
		_, _ = fmt.Fprintf(w, "%s: %s %s (%d bytes)\n", d.id, r.Method, r.URL.Path, n)
	}
}

// startDemo starts n demo backends, named d1 to dn, on loopback ports
// chosen by the system. It returns their specs and a function that stops
// them.
func startDemo(n int, healthPath string, logger *log.Logger) (specs []string, stop func(), err error) {
	var servers []*http.Server
	stop = func() {
		for _, srv := range servers {
			_ = srv.Close() // closing listeners; the demo is over
		}
	}
	for i := 1; i <= n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("lbproxy: demo backend: %w", err)
		}
		d := &demoBackend{id: fmt.Sprintf("d%d", i), healthPath: healthPath}
		srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
		d.stop = func() { _ = srv.Shutdown(context.Background()) } // waits for requests in flight; no deadline to miss
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				logger.Printf("demo backend %s: %v", d.id, err)
			}
		}()
		url := "http://" + ln.Addr().String()
		specs = append(specs, d.id+"="+url)
		logger.Printf("demo backend %s on %s (GET %s/down or /up switches its health, /stop stops it)", d.id, url, url)
	}
	return specs, stop, nil
}
