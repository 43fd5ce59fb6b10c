//go:build !race

package xdpmaglev

// raceEnabled reports whether the race detector is on (see packetsOnly).
const raceEnabled = false
