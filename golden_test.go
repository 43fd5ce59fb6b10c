package maglev

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goldenSizes pins the SHA-256 of the slot array (see slotsSHA256) for the
// first min(M, 100) backends of largeBackends at M = 7, 65537 and 655373, unweighted
// (New) and weighted (NewWeighted with goldenWeights), for every built-in
// hasher. The values were produced by the plain references in the tests
// (slowTable and slowWeighted), not by the package's fills, and checked on
// linux/amd64, linux/386 and linux/s390x (big-endian) by .ci/run. The
// unweighted M = 65537 values also agree with testdata/ref/maglev_ref.c.
// A change to any of them changes deployed tables: a breaking change.
var goldenSizes = map[string]string{
	"xxh3/M=7/weighted=false":           "eab14d1199ccb30a752ba3c05b62a1a034cc257bb694218c50fcd257d8bbecc6",
	"xxh3/M=7/weighted=true":            "ecb9685c67dc9c447376065a7ecf9570766b654747af64380d3993ce084da626",
	"xxh3/M=65537/weighted=false":       "177d8df218e2e5cb604c27db3629720a83f02af53c78dad7c59575a932ec1869",
	"xxh3/M=65537/weighted=true":        "43ad3a192643710c8e6926deafb38f2ee68ae18354f73d4235f7d183f2cff8fb",
	"xxh3/M=655373/weighted=false":      "934326e90e8b5073648cda96d983f739f2079a53c4ab5d5599e2b1d42b2e5b34",
	"xxh3/M=655373/weighted=true":       "cc39cec47a31072a5e54bca2526e3ad52b089ac4b6278c22811f229b4bd9ce48",
	"xxh3-seed/M=7/weighted=false":      "2d20b1db358813af0abd35e342e241a2af5f073f2773fa93b901f6abe0899bd3",
	"xxh3-seed/M=7/weighted=true":       "141fe036acc14a146fa2c538c7dcf0773a08a9d541d63a979d5d06038cb69d2c",
	"xxh3-seed/M=65537/weighted=false":  "8416fe8db569bd903a385e9287a9b092e4a60c38551bfbb55f902d0afe21451e",
	"xxh3-seed/M=65537/weighted=true":   "eee33fefac38b0af732744694d5c04ca6e94e0fb71d23caf3478d445b0c6ebff",
	"xxh3-seed/M=655373/weighted=false": "18e9277216c1b1571516890f0104073a7299a71df70d7314b6641551ba3c0fae",
	"xxh3-seed/M=655373/weighted=true":  "5baab7d7e38106d9016f29c1cb5b742707699a8386d9362a57dc0ce4d782d01d",
	"farm/M=7/weighted=false":           "917d8502961b6099960687f918b6a745dc4934abe90376cf321cd0252afd2e41",
	"farm/M=7/weighted=true":            "72ecbac512c87303c702125acc3aaab8cfeaeb968b430ee76d2158a6751cc15e",
	"farm/M=65537/weighted=false":       "cdac7f17df3c0a868f2180d877a54132c947c3ec78ba0190de79005a74a4cb93",
	"farm/M=65537/weighted=true":        "5ced825c3d99695e2d5ad4d099e7b2947b56d24dec3f3c14f6126eddc11e7263",
	"farm/M=655373/weighted=false":      "cc034ccbbd8a133ab95e0daad47bf3bea62f6360b6a876b98f11f9259797e91a",
	"farm/M=655373/weighted=true":       "5f26f37231a4a56052eed6050f6c42fd7133eaeb8cfff912186e651015083b9b",
	"fnv1a/M=7/weighted=false":          "21f4ab652fa67b1f7acfca0b72965cd24e896e59ceef833ac63dc3572207b277",
	"fnv1a/M=7/weighted=true":           "b5d760a6e78a2582381460b58aa96d68c913e050e2083f8d8b505e00f89f4fa3",
	"fnv1a/M=65537/weighted=false":      "246d95288ac71e4bdeba765fed2dcce2d5d91263bcca6555cd34af6b88eb804f",
	"fnv1a/M=65537/weighted=true":       "5bf01d3e9a1a44af35878eed58f67b4551d591b84c6491648ac39526fe250083",
	"fnv1a/M=655373/weighted=false":     "bdff20bf67829aa868c2536e493639ee74ad22d274bf05d413b518f99ba5f605",
	"fnv1a/M=655373/weighted=true":      "36d9547365fe9b14d3d26291da3b4120717203411b8b83ee7d04f32b6d174fe0",
}

// goldenWeights gives the first n backends of largeBackends weight i mod 5
// (i counting from 0): a mix with drained backends.
func goldenWeights(n int) []Backend {
	names := largeBackends()[:n]
	bs := make([]Backend, len(names))
	for i, n := range names {
		bs[i] = Backend{n, uint32(i % 5)}
	}
	return bs
}

// slotsOf converts owner names to the slot array of indices into sorted.
func slotsOf(owner, sorted []string) []uint32 {
	out := make([]uint32, len(owner))
	for s, name := range owner {
		i, ok := slices.BinarySearch(sorted, name)
		if !ok {
			out[s] = noBackend
			continue
		}
		out[s] = uint32(i)
	}
	return out
}

func goldenKey(hasher string, m int, weighted bool) string {
	return fmt.Sprintf("%s/M=%d/weighted=%v", hasher, m, weighted)
}

// TestGoldenSizes pins tables across sizes, weights and hashers.
func TestGoldenSizes(t *testing.T) {
	for _, b := range builtins {
		for _, m := range []int{7, DefaultSize, 655373} {
			for _, weighted := range []bool{false, true} {
				var tab *Table
				if weighted {
					tab = mustWeighted(t, goldenWeights(min(m, 100)), m, b.h)
				} else {
					tab = mustNew(t, largeBackends()[:min(m, 100)], m, b.h)
				}
				key := goldenKey(b.name, m, weighted)
				if got := slotsSHA256(tab.AppendSlots(nil)); got != goldenSizes[key] {
					t.Errorf("%s: SHA-256 %s, want %s", key, got, goldenSizes[key])
				}
			}
		}
	}
}

// TestGoldenSizesSource checks the golden values against the plain
// references.
func TestGoldenSizesSource(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("plain references at M=655373 skipped in short mode and under the race detector")
	}
	for _, b := range builtins {
		for _, m := range []int{7, DefaultSize, 655373} {
			for _, weighted := range []bool{false, true} {
				sorted := largeBackends()[:min(m, 100)]
				var owner []string
				if weighted {
					owner = slowWeighted(goldenWeights(len(sorted)), m, b.h)
				} else {
					owner = slowTable(sorted, m, b.h)
				}
				sorted = slices.Sorted(slices.Values(sorted))
				key := goldenKey(b.name, m, weighted)
				if got := slotsSHA256(slotsOf(owner, sorted)); got != goldenSizes[key] {
					t.Errorf("%s: plain reference SHA-256 %s, golden %s", key, got, goldenSizes[key])
				}
			}
		}
	}
}

// TestNEqualsM checks the densest table: every backend owns one slot.
func TestNEqualsM(t *testing.T) {
	for _, m := range []int{2, 3, 7, 1009} {
		tab := mustNew(t, names("b", m), m, nil)
		for i, c := range tab.Counts() {
			if c != 1 {
				t.Fatalf("M=N=%d: backend %d owns %d slots", m, i, c)
			}
		}
	}
}

// TestHostileNames checks that names are bytes: NUL bytes, invalid UTF-8
// and 1 MiB names are accepted and kept exactly.
func TestHostileNames(t *testing.T) {
	huge := make([]byte, 1<<20)
	for i := range huge {
		huge[i] = byte(i * 7)
	}
	bs := []string{string(huge), string(huge[:len(huge)-1]) + "\x00", "a\x00b", "a\x00c", "\xff\xfe\xfd", "\xc3\x28", "a|skip", "a|offset", "a"}
	tab := mustNew(t, bs, 1009, nil)
	if got, want := owners(tab), slowTable(bs, 1009, nil); !slices.Equal(got, want) {
		t.Fatal("hostile names: table differs from the plain spec")
	}
	got := tab.Backends()
	for _, b := range bs {
		if i := tab.Index(b); i < 0 || got[i] != b {
			t.Errorf("name %.12q not kept exactly", b)
		}
	}
	for i, c := range tab.Counts() {
		if c != 1009/len(bs) && c != 1009/len(bs)+1 {
			t.Errorf("backend %d owns %d slots", i, c)
		}
	}
}

// TestSeedsUnrelated checks that an outsider who knows the backend names
// but not the fleet's seed cannot predict the table: tables under two
// seeds agree on about 1/N of the slots, as unrelated tables do.
func TestSeedsUnrelated(t *testing.T) {
	const n = 20
	bs := names("10.0.0.", n)
	base := mustNew(t, bs, DefaultSize, XXH3Seed(0x5eed))
	for _, seed := range []uint64{0, 1, 2, 0x5eed + 1, 1 << 63} {
		other := mustNew(t, bs, DefaultSize, XXH3Seed(seed))
		agree := float64(DefaultSize-base.Diff(other)) / DefaultSize
		// Expected 1/N = 5%; the binomial standard deviation over M slots
		// is about 0.09%, so ±1% is over 10 sigma either way.
		if agree < 1.0/n-0.01 || agree > 1.0/n+0.01 {
			t.Errorf("seeds %#x and %#x agree on %.2f%% of slots, want about %.0f%%", 0x5eed, seed, 100*agree, 100.0/n)
		}
	}
}

// TestInlining fails if a small hot function stops being inlinable: a
// refactor that pushes LookupHash over the inliner's budget would add a
// call to every lookup by hash.
func TestInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package; skipped in short mode")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goTool, "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, fn := range []string{
		"(*Table).LookupHash", "(*Table).LookupHashIndex",
		"(*Table).Index", "(*Table).Backend",
		"(*Table).owner", "Permutation.Next",
		"(*Table).Candidates", "(*Table).CandidatesHash", "(*Table).CandidatesBytes",
		// The fill's per-probe helpers: a call there would cost more than
		// the probe.
		"wrap", "firstEmpty16", "firstEmpty[go.shape.uint32]",
	} {
		if !strings.Contains(string(out), "can inline "+fn+"\n") { // the whole name, not a prefix of another
			t.Errorf("%s is no longer inlinable", fn)
		}
	}
}

// goldenWithoutRemoved is the removed set of goldenWithout's tables.
var goldenWithoutRemoved = []string{"10.0.0.7:80", "10.0.0.42:80", "10.0.0.99:80"}

// goldenWithout pins Without per built-in hasher: the M = 13 table of a..e
// without c, as owner names, and the SHA-256 of the slot array (see
// slotsSHA256) of the 100 largeBackends at M = 65537, unweighted (New) and
// weighted (NewWeighted with goldenWeights, whose drained backends stay
// out), without goldenWithoutRemoved. The values were computed by
// slowWithout, the plain rule in without_test.go that walks each
// permutation with Permutation.At, and agree with Without (both are
// checked by TestGoldenWithout). A change to any of them moves keys of
// fleets routing around a failure: a breaking change.
var goldenWithout = map[string]string{
	"xxh3/a-e/M=13":                            "e a e b a b d d e b a b d",
	"xxh3/hosts-100/M=65537":                   "ed1812bbbd1b5aa677b2a63ead3f6527743c9ce8881053580f1306d512dfc44d",
	"xxh3/hosts-100/M=65537/weights=mod5":      "a1f77d7950a76fc56dd27150fd9edd4fa2598a7a50209c20e063d88842a2c943",
	"xxh3-seed/a-e/M=13":                       "a d d e b b e e a a e b b",
	"xxh3-seed/hosts-100/M=65537":              "9d0e232bde5d043077c452c6556044f25dc5cf3963edda5859844eb0f28602e3",
	"xxh3-seed/hosts-100/M=65537/weights=mod5": "262b3be2756a9f552a9b8e3927dea7824447f272ba2d973c7c977cbbb452be04",
	"farm/a-e/M=13":                            "a d a d a b e a a e b a b",
	"farm/hosts-100/M=65537":                   "6902e51bcdb705eaa1b0fb9045b3e2a8e1fd113cfe740d185841aaeedea9c676",
	"farm/hosts-100/M=65537/weights=mod5":      "bd2e3637e76e97760faa755a38968df9ae7d9a80eb27c69117cfca2ea8f79123",
	"fnv1a/a-e/M=13":                           "a e b b a b e a b d e d a",
	"fnv1a/hosts-100/M=65537":                  "532d595d4cc5a02ec9440232d68348ed190f62e8f48cd8ce9a5995e89d1c245b",
	"fnv1a/hosts-100/M=65537/weights=mod5":     "d6ef17eb904165130c9fe3834dfd8bca7593897e05a2fd53dc585865890e5d28",
}

// TestGoldenWithout checks goldenWithout against Without and slowWithout.
func TestGoldenWithout(t *testing.T) {
	for _, b := range builtins {
		small := mustNew(t, []string{"e", "c", "a", "d", "b"}, 13, b.h)
		smallBases := map[string]*Table{b.name + "/a-e/M=13": small}
		bases := map[string]*Table{
			b.name + "/hosts-100/M=65537":              mustNew(t, largeBackends(), DefaultSize, b.h),
			b.name + "/hosts-100/M=65537/weights=mod5": mustWeighted(t, goldenWeights(100), DefaultSize, b.h),
		}
		for key, base := range smallBases {
			got := strings.Join(owners(mustWithout(t, base, "c")), " ")
			var slow []string
			for _, o := range slowWithout(base, []string{"c"}) {
				slow = append(slow, base.Backend(int(o)))
			}
			if got != goldenWithout[key] || strings.Join(slow, " ") != got {
				t.Errorf("%s without c = %q, plain rule %q, golden %q", key, got, slow, goldenWithout[key])
			}
		}
		for key, base := range bases {
			got := slotsSHA256(mustWithout(t, base, goldenWithoutRemoved...).AppendSlots(nil))
			slow := slotsSHA256(slowWithout(base, goldenWithoutRemoved))
			if got != goldenWithout[key] || slow != got {
				t.Errorf("%s without %q: SHA-256 %s, plain rule %s, golden %s", key, goldenWithoutRemoved, got, slow, goldenWithout[key])
			}
		}
	}
}
