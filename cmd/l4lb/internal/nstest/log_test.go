package nstest

import (
	"log/slog"
	"testing"
)

// TestParseRecord: a record written by slog's text handler and by its
// JSON handler parse to the same message, level and attributes.
func TestParseRecord(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var b LogBuffer
		h := slog.Handler(slog.NewTextHandler(&b, nil))
		if format == "json" {
			h = slog.NewJSONHandler(&b, nil)
		}
		slog.New(h).With("service", "web one").Warn("backends applied", "live", 1, "digest", "ab=c\"d", "err", "", slog.Group("applied", "added", 2))
		rs := b.Records()
		if len(rs) != 1 {
			t.Fatalf("%s: records %+v of %q", format, rs, b.String())
		}
		r := rs[0]
		if r.Level != "WARN" || !r.Is("backends applied", "service", "web one", "live", "1", "digest", `ab=c"d`, "err", "", "applied.added", "2") || len(r.Attrs) != 5 {
			t.Errorf("%s: %+v of %q", format, r, b.String())
		}
		if r.Is("backends applied", "live", "2") || r.Is("other", "live", "1") || r.Is("backends applied", "nonesuch", "") {
			t.Errorf("%s: Is matches what differs", format)
		}
	}
	if _, ok := ParseRecord("goroutine 1 [running]:"); ok {
		t.Error("a panic's line parsed as a record")
	}
}
