//go:build !race

package maglev

// raceEnabled reports whether the race detector is on. The package starts
// no goroutine, and its largest checks (a table of MaxSize, the fills at
// every endgame point, the plain references at M = 655,373, the vectors'
// removals) are single-goroutine computations 10 to 30 times slower under
// the detector, which has nothing to watch in them: they run without it,
// in the plain run, and skip under it.
const raceEnabled = false
