package memcachemaglev_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/internal/servertest"
	"github.com/maglevlb/maglev/memcachemaglev"
)

// The memcached tests start their own servers (see servers_test.go); each
// checks what the servers hold, read with one single-server client per
// server.

// newClient returns a client over sel with a timeout that suits loaded
// test machines.
func newClient(sel memcache.ServerSelector) *memcache.Client {
	c := memcache.NewFromSelector(sel)
	c.Timeout = 2 * time.Second
	return c
}

// setAll stores each key (its value the key itself) through c.
func setAll(t *testing.T, c *memcache.Client, ks []string) {
	t.Helper()
	for _, k := range ks {
		if err := c.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
			t.Fatalf("Set(%q): %v", k, err)
		}
	}
}

// getAll reads keys through c in batches and returns the hits, checking
// each value.
func getAll(t *testing.T, c *memcache.Client, ks []string) map[string]bool {
	t.Helper()
	hits := make(map[string]bool, len(ks))
	for i := 0; i < len(ks); i += 100 {
		items, err := c.GetMulti(ks[i:min(i+100, len(ks))])
		if err != nil {
			t.Fatalf("GetMulti: %v", err)
		}
		for k, it := range items {
			if string(it.Value) != k {
				t.Fatalf("%q holds %q", k, it.Value)
			}
			hits[k] = true
		}
	}
	return hits
}

// holders returns, for each key held by some server, the servers that
// hold it, reading each server with its own client.
func holders(t *testing.T, servers []string, ks []string) map[string][]string {
	t.Helper()
	h := make(map[string][]string)
	for _, s := range servers {
		for k := range getAll(t, newClient(serverList(t, s)), ks) {
			h[k] = append(h[k], s)
		}
	}
	return h
}

// serverList returns a memcache.ServerList over servers.
func serverList(t testing.TB, servers ...string) *memcache.ServerList {
	t.Helper()
	var sl memcache.ServerList
	if err := sl.SetServers(servers...); err != nil {
		t.Fatal(err)
	}
	return &sl
}

// flushAll empties every server.
func flushAll(t *testing.T, servers []string) {
	t.Helper()
	for _, s := range servers {
		if err := newClient(serverList(t, s)).FlushAll(); err != nil {
			t.Fatalf("flush_all on %s: %v", s, err)
		}
	}
}

// TestKeysOnTheirOwner sets keys through a Selector over three TCP servers
// and one on a Unix socket, and checks that each key is on the server the
// table names, and on no other.
func TestKeysOnTheirOwner(t *testing.T) {
	servers := addrs(append(startMemcached(t, 3), startMemcachedUnix(t)))
	sel, err := memcachemaglev.New(servers...)
	if err != nil {
		t.Fatal(err)
	}
	table, err := maglev.New(servers, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	ks := keys("owner", 2000)
	setAll(t, newClient(sel), ks)
	perServer := map[string]int{}
	h := holders(t, servers, ks)
	for _, k := range ks {
		if want := table.Lookup(k); len(h[k]) != 1 || h[k][0] != want {
			t.Fatalf("%q is on %q, want on %s only", k, h[k], want)
		}
		perServer[h[k][0]]++
	}
	for _, s := range servers {
		// 2000 keys over 4 servers: 500 expected, standard deviation 19.
		if n := perServer[s]; n < 400 || n > 600 {
			t.Errorf("%s holds %d of 2000 keys, want about 500", s, n)
		}
	}
}

// TestScaleOut stores 10,000 keys on four servers, adds a fifth, and reads
// the same keys back: through a Selector and through memcache.ServerList,
// gomemcache's default. A Selector keeps the keys the fifth server does
// not take, 4/5 of them; the ServerList keeps a key only if crc32(key) mod
// 4 equals crc32(key) mod 5, that is if crc32(key) mod 20 is below 4: 1/5
// of them. With 10,000 keys either rate's standard deviation is 0.004, so
// bounds of ±0.05 around the expectation cannot fail by chance. Each rate
// must also be exactly the one the hash predicts key by key.
func TestScaleOut(t *testing.T) {
	servers := addrs(startMemcached(t, 5))
	four, five := servers[:4], servers
	ks := keys("scale", 10000)

	sel, err := memcachemaglev.New(four...)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(sel)
	setAll(t, c, ks)
	before := sel.Table()
	if err := sel.SetServers(five...); err != nil {
		t.Fatal(err)
	}
	after := sel.Table()
	hits := getAll(t, c, ks)
	for _, k := range ks {
		if stays := before.Lookup(k) == after.Lookup(k); hits[k] != stays {
			t.Fatalf("Selector: %q hit = %v, but its owner stays = %v", k, hits[k], stays)
		}
	}
	ours := float64(len(hits)) / float64(len(ks))

	flushAll(t, servers)
	sl := serverList(t, four...)
	c = newClient(sl)
	setAll(t, c, ks)
	if err := sl.SetServers(five...); err != nil {
		t.Fatal(err)
	}
	hits = getAll(t, c, ks)
	for _, k := range ks {
		sum := crc32.ChecksumIEEE([]byte(k))
		if stays := sum%4 == sum%5; hits[k] != stays {
			t.Fatalf("ServerList: %q hit = %v, but crc32 mod 4 = mod 5 is %v", k, hits[k], stays)
		}
	}
	modulo := float64(len(hits)) / float64(len(ks))

	t.Logf("hit rate after 4 -> 5 servers, %d keys: Selector %.4f, ServerList %.4f", len(ks), ours, modulo)
	if ours < 0.75 || ours > 0.85 {
		t.Errorf("Selector's hit rate %.4f, want 0.80 ± 0.05", ours)
	}
	if modulo < 0.15 || modulo > 0.25 {
		t.Errorf("ServerList's hit rate %.4f, want 0.20 ± 0.05", modulo)
	}
}

// TestServerKilled kills one of four servers: its keys fail, every other
// key still hits. SetServers without it then moves its keys and, of the
// others, only those of Maglev's excess disruption, the few slots whose
// owner changes beyond the dead server's. The servers listen on Unix
// sockets named ./mc0.sock to ./mc3.sock in a directory of the test's, so
// that the table, and that excess, are the same on every run: names from
// random TCP ports put the excess above 1% for about one set in 1,000.
func TestServerKilled(t *testing.T) {
	t.Chdir(t.TempDir())
	path := memcachedPath(t)
	ms := make([]*servertest.Proc, 4)
	for i := range ms {
		ms[i] = startOne(t, path, fmt.Sprintf("./mc%d.sock", i))
	}
	servers := addrs(ms)
	sel, err := memcachemaglev.New(servers...)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(sel)
	ks := keys("kill", 4000)
	setAll(t, c, ks)
	before := sel.Table()
	dead := ms[1].Addr
	ms[1].Stop()

	deadKeys := 0
	for _, k := range ks {
		it, err := c.Get(k)
		if before.Lookup(k) == dead {
			deadKeys++
			if err == nil {
				t.Fatalf("%q, on the killed server, was read: %q", k, it.Value)
			}
			continue
		}
		if err != nil || string(it.Value) != k {
			t.Fatalf("%q, on a live server, failed: %v", k, err)
		}
	}
	if deadKeys < 800 || deadKeys > 1200 {
		t.Errorf("the killed server held %d of %d keys, want about a quarter", deadKeys, len(ks))
	}

	live := append(append([]string(nil), servers[:1]...), servers[2:]...)
	if err := sel.SetServers(live...); err != nil {
		t.Fatal(err)
	}
	after := sel.Table()
	for _, s := range after.Backends() {
		if s == dead {
			t.Fatalf("the killed server %s is still in the table", dead)
		}
	}
	hits := getAll(t, c, ks)
	movedOthers := 0
	for _, k := range ks {
		stays := before.Lookup(k) == after.Lookup(k)
		if before.Lookup(k) != dead && !stays {
			movedOthers++
		}
		if hits[k] != stays {
			t.Fatalf("%q hit = %v after SetServers, but its owner stays = %v", k, hits[k], stays)
		}
	}
	deadSlots := before.Counts()[before.Index(dead)]
	excess := before.Diff(after) - deadSlots
	t.Logf("killed 1 of 4: %d of %d keys on it; SetServers moved %d slots, %d beyond its %d, and %d other keys",
		deadKeys, len(ks), before.Diff(after), excess, deadSlots, movedOthers)
	// Maglev's excess disruption: well under 1% of the slots for 4 -> 3
	// (a few dozen of 65,537 slots).
	if excess < 0 || excess > before.Size()/100 {
		t.Errorf("SetServers moved %d slots beyond the dead server's %d", excess, deadSlots)
	}
	if movedOthers > len(ks)/100 {
		t.Errorf("SetServers moved %d keys of live servers, want under 1%%", movedOthers)
	}
}

// TestNoServersClient checks that a client over a Selector with no servers
// fails with memcache.ErrNoServers.
func TestNoServersClient(t *testing.T) {
	var sel memcachemaglev.Selector
	if _, err := newClient(&sel).Get("k"); !errors.Is(err, memcache.ErrNoServers) {
		t.Errorf("Get with no servers: %v, want memcache.ErrNoServers", err)
	}
}

// keyBound returns how far the number of n keys that land on a server
// owning slots of the m slots may be from its expectation n·slots/m: 5
// standard deviations of that binomial, which a fair hash exceeds with
// probability under 10⁻⁶.
func keyBound(n, slots, m int) float64 {
	p := float64(slots) / float64(m)
	return 5 * math.Sqrt(float64(n)*p*(1-p))
}

// TestWeightedKeysOnTheirOwner sets keys through a Selector over four
// servers of weights 1, 2, 3 and 0 (drained), with a table of 10,007 slots
// and a seed, and checks the exact slot counts, that each key is on the
// server the table names and on no other, that each server's share of the
// keys follows its slots, and that the drained server, though it holds no
// key, is still reached by FlushAll. The same keys read through a Selector
// without the seed hit exactly where the two tables agree. The servers
// listen on ./mc0.sock to ./mc3.sock in a directory of the test's, so the
// table and every count are the same on every run.
func TestWeightedKeysOnTheirOwner(t *testing.T) {
	t.Chdir(t.TempDir())
	path := memcachedPath(t)
	var servers []memcachemaglev.Server
	for i, w := range []uint32{1, 2, 3, 0} {
		m := startOne(t, path, fmt.Sprintf("./mc%d.sock", i))
		servers = append(servers, memcachemaglev.Server{Addr: m.Addr, Weight: w})
	}
	opts := memcachemaglev.Options{TableSize: 10007, Seed: 0x5eed}
	sel, err := memcachemaglev.NewWeighted(servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	table := sel.Table()
	sameTable(t, "NewWeighted", table, mustTable(t, servers, opts.TableSize, opts.Seed))
	// (10007 − 3)·w/6 + 1 for w = 1, 2, 3, rounded by the turns; the
	// drained server owns none. Counts depend on the weights, their order
	// and M, not on the names or the seed.
	if got, want := table.Counts(), []int{1668, 3336, 5003, 0}; !slices.Equal(got, want) {
		t.Fatalf("slot counts %v, want %v", got, want)
	}
	checkShares(t, table)

	c := newClient(sel)
	ks := keys("weighted", 6000)
	setAll(t, c, ks)
	h := holders(t, table.Backends(), ks)
	perServer := map[string]int{}
	for _, k := range ks {
		if want := table.Lookup(k); len(h[k]) != 1 || h[k][0] != want {
			t.Fatalf("%q is on %q, want on %s only", k, h[k], want)
		}
		perServer[h[k][0]]++
	}
	for i, s := range table.Backends() {
		n, slots := perServer[s], table.Counts()[i]
		want := float64(len(ks)*slots) / float64(table.Size())
		t.Logf("%s (weight %d, %d slots): %d of %d keys, expected %.0f", s, table.Weights()[i], slots, n, len(ks), want)
		if d := float64(n) - want; math.Abs(d) > keyBound(len(ks), slots, table.Size()) {
			t.Errorf("%s holds %d keys, want %.0f ± %.0f", s, n, want, keyBound(len(ks), slots, table.Size()))
		}
	}

	// The drained server stays known: FlushAll reaches it.
	drained := servers[3].Addr
	if err := newClient(serverList(t, drained)).Set(&memcache.Item{Key: "stale", Value: []byte("stale")}); err != nil {
		t.Fatal(err)
	}
	if err := c.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(serverList(t, drained)).Get("stale"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("the drained server's key after FlushAll: %v, want a miss", err)
	}

	// The seed moves keys, exactly where the tables disagree.
	setAll(t, c, ks)
	unseeded, err := memcachemaglev.NewWeighted(servers, memcachemaglev.Options{TableSize: opts.TableSize})
	if err != nil {
		t.Fatal(err)
	}
	hits := getAll(t, newClient(unseeded), ks)
	for _, k := range ks {
		if same := table.Lookup(k) == unseeded.Table().Lookup(k); hits[k] != same {
			t.Fatalf("%q hit = %v without the seed, but its server stays = %v", k, hits[k], same)
		}
	}
	// Independent tables of shares 1/6, 2/6, 3/6 agree on a key with
	// probability 1/36 + 4/36 + 9/36 = 0.389.
	rate := float64(len(hits)) / float64(len(ks))
	t.Logf("keys read without the seed: %.4f hit", rate)
	if rate < 0.389-0.05 || rate > 0.389+0.05 {
		t.Errorf("without the seed %.4f of the keys hit, want 0.389 ± 0.05", rate)
	}
}

// TestRepeatsWithGomemcache lists one of three servers twice, gomemcache's
// way of giving it weight 2, to a Selector and to gomemcache's own
// memcache.ServerList, and checks that both put about half of the keys on
// it: the Selector each key where maglev.NewWeighted's table with weights
// 2, 1, 1 says, the ServerList where crc32(key) mod 4 says (indexes 0 and
// 1 being the repeated server).
func TestRepeatsWithGomemcache(t *testing.T) {
	three := addrs(startMemcached(t, 3))
	list := []string{three[0], three[0], three[1], three[2]}
	sel, err := memcachemaglev.New(list...)
	if err != nil {
		t.Fatal(err)
	}
	table := sel.Table()
	sameTable(t, "New with a repeat", table, mustTable(t, []memcachemaglev.Server{
		{Addr: three[0], Weight: 2}, {Addr: three[1], Weight: 1}, {Addr: three[2], Weight: 1},
	}, maglev.DefaultSize, 0))
	checkShares(t, table)
	heavy := table.Index(three[0])
	if got := table.Counts()[heavy]; got < 32767 || got > 32770 {
		t.Errorf("the repeated server owns %d slots, want 65,537/2 within NewWeighted's bound", got)
	}

	ks := keys("repeat", 4000)
	setAll(t, newClient(sel), ks)
	h := holders(t, three, ks)
	onHeavy := 0
	for _, k := range ks {
		if want := table.Lookup(k); len(h[k]) != 1 || h[k][0] != want {
			t.Fatalf("Selector: %q is on %q, want on %s only", k, h[k], want)
		}
		if h[k][0] == three[0] {
			onHeavy++
		}
	}

	flushAll(t, three)
	setAll(t, newClient(serverList(t, list...)), ks)
	h = holders(t, three, ks)
	onHeavyList := 0
	for _, k := range ks {
		want := list[crc32.ChecksumIEEE([]byte(k))%4]
		if len(h[k]) != 1 || h[k][0] != want {
			t.Fatalf("ServerList: %q is on %q, want on %s only", k, h[k], want)
		}
		if want == three[0] {
			onHeavyList++
		}
	}

	t.Logf("keys on the server listed twice, of %d: Selector %d, ServerList %d", len(ks), onHeavy, onHeavyList)
	bound := keyBound(len(ks), 1, 2)
	for name, n := range map[string]int{"Selector": onHeavy, "ServerList": onHeavyList} {
		if d := float64(n) - float64(len(ks))/2; math.Abs(d) > bound {
			t.Errorf("%s: %d of %d keys on the server listed twice, want half ± %.0f", name, n, len(ks), bound)
		}
	}
}
