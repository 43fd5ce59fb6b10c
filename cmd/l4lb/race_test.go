//go:build race

package main

// raceEnabled: this test binary is built with -race.
const raceEnabled = true
