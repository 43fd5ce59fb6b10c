//go:build !race

package main

// raceEnabled reports whether the race detector is on: TestFleet runs the
// lbproxy it builds, without -race, so under the detector it would check
// nothing the plain run does not.
const raceEnabled = false
