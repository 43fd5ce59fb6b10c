package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// backendName returns the name of backend i, counting from 0.
func backendName(i int) string {
	x := i + 1
	return fmt.Sprintf("10.%d.%d.%d:80", x>>16&255, x>>8&255, x&255)
}

// keys returns k synthetic client addresses drawn from a PCG seeded with
// seed.
func keys(k int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0))
	ks := make([]string, k)
	var buf []byte
	for i := range ks {
		buf = append(buf[:0], "198.51."...)
		buf = strconv.AppendUint(buf, r.Uint64N(256), 10)
		buf = append(buf, '.')
		buf = strconv.AppendUint(buf, r.Uint64N(256), 10)
		buf = append(buf, ':')
		buf = strconv.AppendUint(buf, 1024+r.Uint64N(65536-1024), 10)
		ks[i] = string(buf)
	}
	return ks
}
