package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/maglevlb/maglev/httpmaglev"
)

// A config is everything newProxy needs; main fills it from flags.
type config struct {
	// HTTP is the Transport's config, as the flags set it (a zero is the
	// library's default there too, and its rules check every value).
	// newProxy fills in what comes from the other fields and from lbproxy
	// itself: Backends, Key, Hasher, Base, Logger and MeterProvider.
	HTTP httpmaglev.Config

	Backends       []string // "URL" or "NAME=URL" specs, see parseBackend
	Key            string   // "ip" or "header:NAME", see parseKey
	Seed           uint64   // XXH3 seed of the table; 0 is plain XXH3
	IdlePerBackend int      // idle connections kept per backend; 0 for 32 (no flag: the load tests set it)
	Dynamic        bool     // the backends come from etcd or DNS, after newProxy: Backends may be empty
}

// parseBackend parses a backend spec: a base URL such as
// "http://127.0.0.1:9001", or "NAME=URL" to give the backend a name of its
// own (any name, "10.0.0.1:80" too). The table hashes names, not
// addresses, so a named backend keeps its slots when its address changes.
// An unnamed one is named as httpmaglev names it: by its URL's host,
// HOST:PORT, so that lbproxy and a Go client given the same URLs build the
// same table.
func parseBackend(spec string) (name string, u *url.URL, err error) {
	raw := spec
	if n, rest, ok := strings.Cut(spec, "="); ok && (strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://")) {
		if n == "" {
			return "", nil, fmt.Errorf("lbproxy: backend %q: empty name", spec)
		}
		name, raw = n, rest
	}
	u, err = url.Parse(raw)
	if err != nil {
		return "", nil, fmt.Errorf("lbproxy: backend %q: %v", spec, err)
	}
	if u, err = httpmaglev.BaseURL(u); err != nil {
		return "", nil, fmt.Errorf("lbproxy: backend %q: want http://HOST:PORT or https://HOST:PORT, without path, query or user", spec)
	}
	if name == "" {
		name = u.Host
	}
	return name, u, nil
}

// splitList splits comma-separated values into trimmed, non-empty items.
func splitList(values ...string) []string {
	var items []string
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
	}
	return items
}

// readBackendsFile returns the backend specs in the named file: one a line;
// blank lines and everything from a '#' on are ignored.
func readBackendsFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lbproxy: %w", err)
	}
	defer func() { _ = f.Close() }() // read only: Close cannot lose data
	var specs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			specs = append(specs, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lbproxy: %s: %w", path, err)
	}
	return specs, nil
}
