package config

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
)

var write = flag.Bool("write", false, "write the settings table of docs/l4lb-reference.md from the declarations")

// docsPath is the page whose "Settings" section holds the table.
const docsPath = "../../../../docs/l4lb-reference.md"

// The table's markers in docsPath.
const (
	tableStart = "<!-- the settings table: go generate ./cmd/l4lb/internal/config writes it from the declarations -->\n"
	tableEnd   = "<!-- end of the settings table -->\n"
)

// TestDocsTable: the settings table of docs/l4lb-reference.md is the declarations'
// (setting.Table of Settings), row for row; with -write (go generate) it
// writes it there.
func TestDocsTable(t *testing.T) {
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableStart), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no settings table between %q and %q", docsPath, tableStart, tableEnd)
	}
	want := setting.Table(Settings())
	got := doc[i+len(tableStart) : j]
	if *write {
		if err := os.WriteFile(docsPath, []byte(doc[:i+len(tableStart)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for k := range max(len(gl), len(wl)) {
			var g, w string
			if k < len(gl) {
				g = gl[k]
			}
			if k < len(wl) {
				w = wl[k]
			}
			if g != w {
				t.Errorf("%s's settings table differs from the declarations at row %d:\n  docs: %s\n  want: %s", docsPath, k+1, g, w)
				break
			}
		}
		t.Errorf("run go generate ./cmd/l4lb/internal/config to write the declarations' table")
	}
}

// TestSettingsDeclared: every setting has a name, a scope and a doc; the
// file's keys are each one setting's; the flags of each command are each
// one setting's; only a service's settings and its source's and health
// check's may change by a reload, and those of the load balancer's own
// that it reads only at start (the handoff peers, asked then).
func TestSettingsDeclared(t *testing.T) {
	atStart := map[string]bool{"handoff-peer": true}
	for _, s := range Settings() {
		if s.Name == "" || s.Scope == "" || s.Doc == "" || strings.Contains(s.Doc, "\n") {
			t.Errorf("%+v: a name, a scope and one line of doc", s)
		}
		lbOwn := s.Scope == setting.LB || s.Scope == setting.Decap
		if s.Reload == (lbOwn && !atStart[s.Name]) && !s.FlagOnly {
			t.Errorf("%s: scope %s, reload %v", s.Name, s.Scope, s.Reload)
		}
	}
	fileKeys := 0
	for _, s := range Settings() {
		if s.KeyName() != "" && s.Scope != setting.Decap {
			fileKeys++
		}
	}
	if len(keys) != fileKeys {
		t.Errorf("%d keys of a file for %d settings with one: a key twice", len(keys), fileKeys)
	}
	for cmd, ss := range map[string][]*setting.Setting{"run": runSettings, "decap": decapSettings, "detach": detachSettings} {
		seen := map[string]bool{}
		for _, s := range ss {
			if seen[s.Name] {
				t.Errorf("l4lb %s: -%s twice", cmd, s.Name)
			}
			seen[s.Name] = true
		}
	}
}
