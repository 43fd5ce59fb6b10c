package maglev

// TestVectorsGolden (vectors_golden_test.go) is in package maglev_test, so
// that it can read testdata/vectors through internal/vectors, which imports
// this package, and so through the checks of its reader. These give it the
// golden values of this package's tests.
var (
	GoldenSmall   = goldenSmall
	GoldenLarge   = goldenLarge
	GoldenSizes   = goldenSizes
	GoldenKey     = goldenKey
	LargeBackends = largeBackends
	// GoldenWithout and GoldenWithoutRemoved are TestGoldenWithout's.
	GoldenWithout        = goldenWithout
	GoldenWithoutRemoved = goldenWithoutRemoved
)

// RaceEnabled is raceEnabled (norace_test.go).
const RaceEnabled = raceEnabled

// BuiltinNames returns the names of builtins, in order.
func BuiltinNames() []string {
	names := make([]string, len(builtins))
	for i, b := range builtins {
		names[i] = b.name
	}
	return names
}
