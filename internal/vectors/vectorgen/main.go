// Command vectorgen writes the test vectors in testdata/vectors, one JSON
// file per built-in hasher (see docs/spec.md). Run it from the repository
// root,
//
//	go run ./internal/vectors/vectorgen
//
// or through go generate ./internal/vectors. With -check it writes nothing
// and exits 1 if a file differs from what it would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/maglevlb/maglev/internal/vectors"
)

func main() {
	dir := flag.String("dir", "testdata/vectors", "folder to write the files to")
	check := flag.Bool("check", false, "only check that the files are up to date")
	flag.Parse()
	stale := 0
	for _, h := range vectors.Hashers {
		f, err := vectors.Build(h)
		if err != nil {
			fail(err)
		}
		data, err := vectors.Marshal(f)
		if err != nil {
			fail(err)
		}
		path := filepath.Join(*dir, h.ID+".json")
		if *check {
			old, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(old, data) {
				fmt.Fprintf(os.Stderr, "vectorgen: %s is not up to date\n", path)
				stale++
			}
			continue
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			fail(err)
		}
	}
	if stale > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "vectorgen:", err)
	os.Exit(1)
}
