package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestProgress(t *testing.T) {
	var b strings.Builder
	p := progress{w: &b}
	p.say("routing keys: %s", thousands(1234567))
	p.say("done %d", 2)
	p.done()
	want := regexp.MustCompile(`^\r\x1b\[K +\d+\.\ds  routing keys: 1,234,567\r\x1b\[K +\d+\.\ds  done 2\r\x1b\[K$`)
	if !want.MatchString(b.String()) {
		t.Errorf("progress wrote %q", b.String())
	}
	// Without a writer it says nothing, and does not fail.
	var quiet progress
	quiet.say("nothing %d", 1)
	quiet.done()
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if isTerminal(f) || isTerminal(&strings.Builder{}) {
		t.Error("a regular file or a strings.Builder is taken for a terminal")
	}
	// The tests run compare with stderr to a pipe: it must stay quiet.
	_, stderr, status := maglevCmd(t, "", "compare", "-k", "100", "-n", "5", "-vnodes", "5")
	if status != 0 || stderr != "" {
		t.Errorf("status %d, stderr %q; want 0 and no progress", status, stderr)
	}
}
