// Package handoff keeps second chance for a load balancer that did not
// see a service's change: each service's table and second hops
// (xdpmaglev.Handoff) written to a state file after every change, for the
// next l4lb on this machine, and served to the other load balancers of
// the fleet, which ask for them when they start.
// docs/l4lb-howto-second-chance.md, "Second chance across restarts and
// load balancers".
package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// Path is the HTTP path of a load balancer's handoffs, on its admin
// listener and on its peer listener.
const Path = "/debug/maglev/handoff"

// Wait is how long a starting load balancer waits for its peers, all
// asked at once, before it applies its services with what it has.
const Wait = 2 * time.Second

// maxBody bounds a peer's answer: a service's handoff is about two
// octets per moved slot, so a few hundred services at most.
const maxBody = 64 << 20

// state is the state file's form.
type state struct {
	V        int                 `json:"v"`
	Written  time.Time           `json:"written"`
	Handoffs []xdpmaglev.Handoff `json:"handoffs"`
}

// Read returns the handoffs of the state file at path, each From "state
// file", and when it was written; nothing, with no error, if there is no
// file.
func Read(path string) ([]xdpmaglev.Handoff, time.Time, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("state file: %w", err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, time.Time{}, fmt.Errorf("state file %s: %w", path, err)
	}
	if s.V != 1 {
		return nil, time.Time{}, fmt.Errorf("state file %s: version %d, not 1", path, s.V)
	}
	for i := range s.Handoffs {
		s.Handoffs[i].From = "state file"
	}
	return s.Handoffs, s.Written, nil
}

// Write writes hs to the state file at path, whole or not at all: to a
// temporary file beside it, synced, then renamed over it.
func Write(path string, hs []xdpmaglev.Handoff) error {
	b, err := json.Marshal(state{V: 1, Written: time.Now().UTC(), Handoffs: hs})
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

// Handler serves lb's handoffs as a JSON array (GET Path).
func Handler(lb *xdpmaglev.LB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		hs := lb.Handoffs()
		if hs == nil {
			hs = []xdpmaglev.Handoff{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(hs) // a failed write is the peer's to see
	})
}

// Serve serves lb's handoffs to the fleet on addr (GET Path, nothing
// else), until Close.
func Serve(addr string, lb *xdpmaglev.LB, log *slog.Logger) (io.Closer, error) {
	a, err := ops.ServeAdmin(addr, Handler(lb))
	if err != nil {
		return nil, fmt.Errorf("-handoff-listen: %w", err)
	}
	log.Info("handoffs for the fleet", "url", "http://"+a.Addr().String()+Path)
	return a, nil
}

// An Answer is a peer's: its handoffs, or why it gave none.
type Answer struct {
	Peer     string
	Handoffs []xdpmaglev.Handoff // each From "peer ADDR"
	Err      error
}

// Ask asks each peer (HOST:PORT of its peer or admin listener) for its
// handoffs, all at once, and returns their answers in the order of
// peers, once every one answered or wait passed (then the late ones'
// Err says so).
func Ask(ctx context.Context, peers []string, wait time.Duration) []Answer {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	out := make([]Answer, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			hs, err := ask(ctx, p)
			out[i] = Answer{Peer: p, Handoffs: hs, Err: err}
		})
	}
	wg.Wait()
	return out
}

// client asks the peers: no proxy (a peer is on the fleet's network),
// no keep-alive (one request each).
var client = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
	DialContext: (&net.Dialer{Timeout: Wait}).DialContext}}

func ask(ctx context.Context, peer string) ([]xdpmaglev.Handoff, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+peer+Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("an answer of more than %d MiB", maxBody>>20)
	}
	var hs []xdpmaglev.Handoff
	if err := json.Unmarshal(b, &hs); err != nil {
		return nil, err
	}
	for i := range hs {
		hs[i].From = "peer " + peer
	}
	return hs, nil
}

// Take gives lb the handoffs of the services it will start
// (xdpmaglev.LB.SetHandoffs), before it starts them: the state file's at
// stateFile ("": none), then those of the peers, asked at once and
// waited for Wait at most, in their order; each service takes the first
// whose table is its own, else the first. A service lb has already (a
// pinned restart) keeps its own second hops. It logs what it took, and
// what it could not.
func Take(ctx context.Context, lb *xdpmaglev.LB, stateFile string, peers []string, log *slog.Logger) {
	var hs []xdpmaglev.Handoff
	if stateFile != "" {
		got, written, err := Read(stateFile)
		switch {
		case err != nil:
			log.Warn("handoff: the state file is unreadable; starting without it", "path", stateFile, "err", err)
		case written.IsZero():
			log.Info("handoff: no state file yet", "path", stateFile)
		default:
			log.Info("handoff: took the state file", "path", stateFile, "services", len(got), "written", written.Format(time.RFC3339))
			hs = append(hs, got...)
		}
	}
	for _, a := range Ask(ctx, peers, Wait) {
		if a.Err != nil {
			log.Warn("handoff: a peer did not answer", "peer", a.Peer, "err", a.Err)
			continue
		}
		log.Info("handoff: took a peer's", "peer", a.Peer, "services", len(a.Handoffs))
		hs = append(hs, a.Handoffs...)
	}
	if err := lb.SetHandoffs(hs); err != nil {
		log.Warn("handoff: none taken", "err", err) // each was checked as it was read: none, normally
	}
}

// A Writer writes a load balancer's handoffs to its state file, once
// started, each time it is told of a change, one write at a time, from a
// goroutine of its own. A nil *Writer (no state file) does nothing.
type Writer struct {
	path    string
	lb      *xdpmaglev.LB
	log     *slog.Logger
	kick    chan struct{}
	done    chan struct{}
	mu      sync.Mutex // guards started and closed, and kick's sends
	started bool
	closed  bool
}

// NewWriter returns the writer of lb's handoffs to path, or nil if path
// is "". It writes nothing until Start: a load balancer whose first
// services fail to start leaves the file as the last one wrote it.
func NewWriter(path string, lb *xdpmaglev.LB, log *slog.Logger) *Writer {
	if path == "" {
		return nil
	}
	return &Writer{path: path, lb: lb, log: log, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Start writes the handoffs at once, and after each Changed from then on.
func (w *Writer) Start() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.closed {
		return
	}
	w.started = true
	w.kick <- struct{}{}
	go w.run()
}

// Changed tells a started writer that the handoffs changed: it writes
// them soon, without blocking the caller.
func (w *Writer) Changed() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started || w.closed {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default: // a write is due already: it will read the latest
	}
}

func (w *Writer) run() {
	defer close(w.done)
	var last error
	for range w.kick {
		err := Write(w.path, w.lb.Handoffs())
		if err != nil && (last == nil || err.Error() != last.Error()) {
			w.log.Warn("handoff: writing the state file failed", "path", w.path, "err", err)
		}
		last = err
	}
}

// Close stops a started writer, writing the handoffs a last time (and
// logging that write's error). A writer never started writes nothing.
func (w *Writer) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if !w.started || w.closed {
		w.closed = true
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.kick)
	w.mu.Unlock()
	<-w.done
	if err := Write(w.path, w.lb.Handoffs()); err != nil {
		w.log.Warn("handoff: writing the state file failed", "path", w.path, "err", err)
	}
}
