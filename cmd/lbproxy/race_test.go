//go:build race

package main

// raceEnabled: see norace_test.go.
const raceEnabled = true
