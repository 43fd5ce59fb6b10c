package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// A progress reports what compare is doing on one line of a terminal. The
// zero value, with no writer, says nothing.
type progress struct {
	w     io.Writer
	start time.Time
}

// say replaces the line with the time since the first say and the
// message.
func (p *progress) say(format string, args ...any) {
	if p.w == nil {
		return
	}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	// Progress is best effort: a failed write is not worth stopping for.
	_, _ = fmt.Fprintf(p.w, "\r\x1b[K%5.1fs  %s", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// done clears the line.
func (p *progress) done() {
	if p.w != nil {
		_, _ = io.WriteString(p.w, "\r\x1b[K")
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
