package main

import (
	"encoding/json"
	"io"
)

// A report is the result of compare, as -json prints it.
type report struct {
	N       int      `json:"n"`
	K       int      `json:"k"`
	Hash    string   `json:"hash"`
	Seed    uint64   `json:"seed"`
	KeySeed uint64   `json:"key_seed"`
	Weights []uint32 `json:"weights,omitempty"`
	// BackendsFile and KeysFile name the files the backends and the keys
	// came from, "-" for standard input; empty for synthetic ones.
	BackendsFile string `json:"backends_file,omitempty"`
	KeysFile     string `json:"keys_file,omitempty"`
	Weighted     bool   `json:"weighted,omitempty"` // weights were given
	// Zipf is the -zipf exponent, 0 for uniform keys, and HotKeyShare the
	// fraction of the requests the most popular key draws under it.
	Zipf        float64  `json:"zipf,omitempty"`
	HotKeyShare float64  `json:"hot_key_share,omitempty"`
	Added       string   `json:"added_backend"`
	Removed     string   `json:"removed_backend"`
	NoiseFloor  float64  `json:"noise_floor"` // √(N/K)
	Go          string   `json:"go"`
	Platform    string   `json:"platform"`
	CPUs        int      `json:"cpus"`
	Rows        []result `json:"rows"`

	names []string // the base backends' names, in order
}

// A result is one row of a report: one algorithm's measurements.
type result struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"` // "maglev", "ring" or "bounded"
	M         int    `json:"m,omitempty"`
	Vnodes    int    `json:"vnodes,omitempty"`
	// A bounded row's balance factor, its requests in flight, and the
	// fraction of the requests placed past their key's first candidate.
	BalanceFactor float64  `json:"balance_factor,omitempty"`
	InFlight      int      `json:"inflight,omitempty"`
	Spilled       *float64 `json:"spilled,omitempty"`
	BuildNs       int64    `json:"build_ns"`
	MemoryBytes   int64    `json:"memory_bytes"`
	AllocBytes    uint64   `json:"alloc_bytes"`
	LookupNs      float64  `json:"lookup_ns"`
	LoadMax       float64  `json:"load_max_mean"`
	LoadMin       float64  `json:"load_min_mean"`
	LoadStddev    float64  `json:"load_stddev_mean"`
	Add           moves    `json:"add"`
	Remove        moves    `json:"remove"`
	Fail          moves    `json:"fail"`

	loads []float64 // per-backend load over fair share, NaN if drained
}

// moves is the disruption of one membership change, as fractions of the
// requests.
type moves struct {
	Moved  float64 `json:"moved"`  // requests whose backend changed
	Ideal  float64 `json:"ideal"`  // the least that must move
	Excess float64 `json:"excess"` // requests moved between unchanged backends
}

// writeJSON writes r as indented JSON.
func writeJSON(w io.Writer, r *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
