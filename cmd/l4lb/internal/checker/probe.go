package checker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/maglevlb/maglev/internal/health"
)

// run is a probe of b's, in a goroutine of its own (its timer's): it
// probes, records the result, and arms the timer for the next probe, an
// interval after this one started, unless b was stopped meanwhile. A
// probe that started late does not hurry the next one: a process short of
// CPU probes less often, rather than piling probes up (an interval after
// the one before was due, 10,000 backends a second on a loaded machine
// fell behind and missed deadlines).
func (c *Checker) run(b *probed) {
	defer c.wg.Done()
	start := time.Now()
	err := c.probe(b) // no lock held: it waits on the network
	took := time.Since(start)
	if b.ctx.Err() != nil {
		return // stopped
	}
	c.record(b, err, took)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !b.stopped {
		c.wg.Add(1)
		b.timer.Reset(max(c.cfg.Interval-time.Since(start), 0))
	}
}

// record counts a probe of b's: its result in b's health, and a change
// of service if there is one (to down, or back up; not a new backend's
// first pass, which was in service already), logged and passed to
// changed.
func (c *Checker) record(b *probed, err error, took time.Duration) {
	outcome := c.okAttrs
	if err != nil {
		outcome = c.failAttrs
	}
	c.probeDur.Record(context.Background(), took.Seconds(), outcome)
	c.mu.Lock()
	if b.stopped {
		c.mu.Unlock()
		return
	}
	b.probes++
	if err != nil {
		b.err = err.Error()
	}
	was := b.health.State()
	state, _ := b.health.Record(err == nil)
	var msg string
	level, attrs := slog.LevelInfo, []any{"backend", b.addr.String()}
	switch {
	case was.InService() == state.InService():
	case state == health.Up:
		b.ups++
		msg, attrs = "health: backend up", append(attrs, "passed", b.health.Passed())
	default: // down: after fall probes failed in a row, or its first
		b.downs++
		msg, level, attrs = "health: backend down", slog.LevelWarn, append(attrs, "failed", b.health.Failed(), "err", b.err)
		if was == health.Unknown {
			attrs = append(attrs, "first_probe", true)
		}
	}
	c.mu.Unlock()
	if msg == "" {
		return
	}
	c.log.Log(context.Background(), level, msg, attrs...)
	c.changed()
}

// probe checks b once, within the timeout: a TCP connect, or an HTTP GET
// whose status must be the configured one.
func (c *Checker) probe(b *probed) error {
	deadline := time.Now().Add(c.cfg.Timeout)
	if c.cfg.Kind == "http" {
		return c.probeHTTP(b, deadline)
	}
	ctx, cancel := context.WithDeadline(b.ctx, deadline)
	defer cancel()
	conn, err := c.dialer.DialContext(ctx, "tcp", b.target)
	if err != nil {
		return err
	}
	return conn.Close()
}

// probeHTTP GETs b's path on its kept connection, dialled if it has none,
// by the deadline, and checks the status. A kept connection that the
// backend closed since the last probe (the GET meets its end or a reset
// before a byte of response) is dialled anew, once, as net/http's
// transport retries such a GET.
func (c *Checker) probeHTTP(b *probed, deadline time.Time) error {
	if b.reqErr != nil {
		return b.reqErr
	}
	for retried := false; ; retried = true {
		kept := b.conn != nil
		if !kept {
			ctx, cancel := context.WithDeadline(b.ctx, deadline)
			conn, err := c.dialer.DialContext(ctx, "tcp", b.target)
			cancel()
			if err != nil {
				return fmt.Errorf("GET %s: %w", b.req.URL, err)
			}
			b.conn = conn
			b.unwatch = context.AfterFunc(b.ctx, func() { _ = conn.Close() }) // stopped: a GET under way ends
		}
		status, keep, answered, err := b.get(deadline)
		if !keep {
			b.drop()
		}
		switch {
		case err != nil && kept && !answered && !retried && b.ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case err != nil:
			return fmt.Errorf("GET %s: %w", b.req.URL, err)
		case status != c.cfg.Status:
			return fmt.Errorf("GET %s: status %d, want %d", b.req.URL, status, c.cfg.Status)
		}
		return nil
	}
}

// readers are the buffered readers of HTTP probes under way, so that a
// kept connection holds none.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1<<10) }}

// get writes b's GET on b.conn and reads the response, past any 1xx, and
// its body to its end (up to 64 KiB: the status decides, not the body).
// It returns the status, whether the connection may serve the next GET,
// and whether any response came.
func (b *probed) get(deadline time.Time) (status int, keep, answered bool, err error) {
	if err := b.conn.SetDeadline(deadline); err != nil {
		return 0, false, false, err
	}
	if _, err := b.conn.Write(b.wire); err != nil {
		return 0, false, false, err
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(b.conn)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	for range 5 { // net/http's transport reads at most five 1xx too
		if _, err := br.Peek(1); err != nil {
			return 0, false, answered, err
		}
		answered = true
		resp, err := http.ReadResponse(br, b.req)
		if err != nil {
			return 0, false, true, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		// Read to its end, the body needs no Close; a longer one is left
		// unread, with its connection.
		n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10+1))
		// Kept if the body ended, nothing came after it, and the backend
		// keeps the connection alive.
		keep = err == nil && n <= 64<<10 && !resp.Close && br.Buffered() == 0 && resp.StatusCode != http.StatusSwitchingProtocols
		return resp.StatusCode, keep, true, nil
	}
	return 0, false, true, errors.New("more than five 1xx responses")
}

// drop closes b's kept connection, if any.
func (b *probed) drop() {
	if b.conn == nil {
		return
	}
	b.unwatch()
	_ = b.conn.Close()
	b.conn, b.unwatch = nil, nil
}
