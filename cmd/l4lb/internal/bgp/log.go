package bgp

import (
	"context"
	"log/slog"
)

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
