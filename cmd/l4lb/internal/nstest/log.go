// Package nstest holds LogBuffer, the log of a test's records that the
// test waits on. It is for tests only; the namespaces and frames l4lb's
// tests need are xdpmaglev/xdptest's.
package nstest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer collects log records for a test, safe for the goroutines
// that log: a slog handler's writer.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Await waits up to 10 s for the log to have s, and returns the log; the
// test fails if it does not.
func (l *LogBuffer) Await(t testing.TB, s string) string {
	t.Helper()
	for range 200 {
		if out := l.String(); strings.Contains(out, s) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the log has no %q in 10 s:\n%s", s, l.String())
	return ""
}

// A Record is a log record as a test compares it: its level, message and
// other attributes, each value as text (a JSON record's numbers as
// written, its lists and objects as JSON; a text record's values
// unquoted).
type Record struct {
	Level, Msg string
	Attrs      map[string]string
}

// Is reports whether r's message is msg and its attributes have the
// values of kv, pairs of a key and a value.
func (r Record) Is(msg string, kv ...string) bool {
	if r.Msg != msg {
		return false
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if v, ok := r.Attrs[kv[i]]; !ok || v != kv[i+1] {
			return false
		}
	}
	return true
}

// ParseRecord parses a record of slog's JSON handler (a line that starts
// with "{") or of its text handler (key=value pairs, values quoted where
// they need it). Groups are flattened, their keys joined by ".". It
// returns false for a line that is neither.
func ParseRecord(line string) (Record, bool) {
	line = strings.TrimSuffix(line, "\n")
	attrs := map[string]string{}
	if strings.HasPrefix(line, "{") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return Record{}, false
		}
		flatten("", m, attrs)
	} else if !parseText(line, attrs) {
		return Record{}, false
	}
	r := Record{Level: attrs["level"], Msg: attrs["msg"], Attrs: attrs}
	delete(attrs, "level")
	delete(attrs, "msg")
	delete(attrs, "time")
	return r, r.Level != ""
}

// flatten puts the attributes of the JSON object m into attrs, a group's
// keys after its own and a dot.
func flatten(prefix string, m map[string]json.RawMessage, attrs map[string]string) {
	for k, raw := range m {
		var sub map[string]json.RawMessage
		if len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &sub) == nil {
			flatten(prefix+k+".", sub, attrs)
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			attrs[prefix+k] = s
		} else {
			attrs[prefix+k] = string(raw)
		}
	}
}

// parseText puts the key=value pairs of a text record into attrs.
func parseText(line string, attrs map[string]string) bool {
	for line != "" {
		k, rest, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \"") {
			return false
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return false
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		attrs[k] = v
		line = strings.TrimPrefix(rest, " ")
	}
	return true
}

// Records returns the records logged so far that ParseRecord parses.
func (l *LogBuffer) Records() []Record {
	var out []Record
	for line := range strings.Lines(l.String()) {
		if r, ok := ParseRecord(line); ok {
			out = append(out, r)
		}
	}
	return out
}

// AwaitRecord waits up to 10 s for a record whose message is msg and
// whose attributes have the values of kv (Record.Is), and returns it;
// the test fails if none comes.
func (l *LogBuffer) AwaitRecord(t testing.TB, msg string, kv ...string) Record {
	t.Helper()
	for range 200 {
		for _, r := range l.Records() {
			if r.Is(msg, kv...) {
				return r
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the log has no record %q %q in 10 s:\n%s", msg, kv, l.String())
	return Record{}
}
