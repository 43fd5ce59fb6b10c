package main

import (
	"context"
	"io"
	"log/slog"
)

// newLogger returns the logger of l4lb's records on w, standard error:
// -log-format text (slog's key=value lines) or json (one JSON object a
// line), each record with its time, level and message.
func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// A loggedError is an error run has logged already: main only exits.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// minLevel is a handler that passes on the records of min and above, for
// a library whose Info records would repeat l4lb's own (GoBGP's).
type minLevel struct {
	slog.Handler
	min slog.Leveler
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min.Level() && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
