package main

import (
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
