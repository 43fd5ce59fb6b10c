package setting

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// point is a value of two fields, for the mapping form.
type point struct{ x, y int }

func (p point) String() string { return fmt.Sprintf("%d,%d", p.x, p.y) }

func parsePoint(s string) (point, error) {
	x, y, ok := strings.Cut(s, ",")
	if !ok {
		return point{}, errors.New("X,Y")
	}
	return pointOf(map[string]string{"x": x, "y": y})
}

func pointOf(f map[string]string) (point, error) {
	x, err := strconv.Atoi(f["x"])
	if err != nil {
		return point{}, errors.New("x: not a number")
	}
	y, err := strconv.Atoi(f["y"])
	if err != nil {
		return point{}, errors.New("y: not a number")
	}
	return point{x, y}, nil
}

var (
	tName   = New(Setting{Name: "name", Scope: LB, Doc: "the `NAME`"}, "anon", String)
	tCount  = New(Setting{Name: "count", Scope: Service, Reload: true, Doc: "how many"}, 3, Int)
	tEvery  = New(Setting{Name: "every", Scope: Health, Needs: "check", Doc: "how often, | between"}, 2*time.Second, Duration)
	tQuiet  = New(Setting{Name: "quiet", Scope: LB, FlagOnly: true, Doc: "say less"}, false, Bool)
	tPoints = NewList(Setting{Name: "point", Key: "points", Scope: Service, Own: true, Fields: []string{"x", "y"}, Doc: "a point"}, One(parsePoint)).WithFields(pointOf).Checked(func(have []point, p point) error {
		for _, h := range have {
			if h == p {
				return fmt.Errorf("%v: given twice", p)
			}
		}
		return nil
	})
	tSeed     = New(Setting{Name: "seed", Scope: LB, Also: Decap, Doc: "the seed"}, uint64(0), Uint64)
	tTitle    = New(Setting{Name: "title", Scope: Service, KeyOnly: true, Own: true, Doc: "the service's title"}, "", String)
	tSettings = []*Setting{tName.Setting, tCount.Setting, tEvery.Setting, tQuiet.Setting, tPoints.Setting, tSeed.Setting, tTitle.Setting}
)

// TestValues: values given are parsed and read back typed, defaults
// stand in for the others, a list appends, a mapping gives a list's
// value, Checked refuses a value, Format is the text of a value or
// default.
func TestValues(t *testing.T) {
	var vs Values
	if tName.Get(&vs) != "anon" || tCount.Get(&vs) != 3 || tEvery.Get(&vs) != 2*time.Second || tQuiet.Get(&vs) || tPoints.Get(&vs) != nil {
		t.Fatal("defaults")
	}
	for _, c := range []struct {
		s    *Setting
		text string
	}{{tName.Setting, "web"}, {tCount.Setting, "0x10"}, {tEvery.Setting, "500ms"}, {tQuiet.Setting, "true"}, {tPoints.Setting, "1,2"}} {
		if err := vs.Set(c.s, c.text); err != nil {
			t.Fatalf("%s %q: %v", c.s.Name, c.text, err)
		}
	}
	if err := vs.SetFields(tPoints.Setting, map[string]string{"x": "3", "y": "4"}); err != nil {
		t.Fatal(err)
	}
	if tName.Get(&vs) != "web" || tCount.Get(&vs) != 16 || tEvery.Get(&vs) != 500*time.Millisecond || !tQuiet.Get(&vs) ||
		fmt.Sprint(tPoints.Get(&vs)) != "[1,2 3,4]" || !vs.Given(tCount.Setting) || vs.Given(tSeed.Setting) {
		t.Errorf("values: %v", vs.m)
	}
	if vs.Format(tEvery.Setting) != "500ms" || vs.Format(tSeed.Setting) != "0" || vs.Format(tPoints.Setting) != "[1,2 3,4]" {
		t.Errorf("Format: %q %q %q", vs.Format(tEvery.Setting), vs.Format(tSeed.Setting), vs.Format(tPoints.Setting))
	}
	for _, c := range []struct {
		s      *Setting
		text   string
		fields map[string]string
		want   string
	}{
		{s: tCount.Setting, text: "many", want: "not an integer"},
		{s: tSeed.Setting, text: "-1", want: "not an integer in [0, 18446744073709551615]"},
		{s: tSeed.Setting, text: "18446744073709551616", want: "out of range"},
		{s: tEvery.Setting, text: "2", want: "not a duration (300ms, 2s, 1m30s)"},
		{s: tQuiet.Setting, text: "yes", want: "not a boolean (true or false)"},
		{s: tPoints.Setting, text: "1", want: "X,Y"},
		{s: tPoints.Setting, fields: map[string]string{"x": "1", "z": "2"}, want: `unknown key "z" (x, y)`},
		{s: tPoints.Setting, fields: map[string]string{"x": "1", "y": "b"}, want: "y: not a number"},
		{s: tCount.Setting, fields: map[string]string{"x": "1"}, want: "a value, not a mapping"},
		{s: tPoints.Setting, text: "3,4", want: "3,4: given twice"},
		{s: tPoints.Setting, fields: map[string]string{"x": "1", "y": "2"}, want: "1,2: given twice"},
	} {
		var err error
		if c.fields != nil {
			err = vs.SetFields(c.s, c.fields)
		} else {
			err = vs.Set(c.s, c.text)
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("%s %q %v: %v, want %q", c.s.Name, c.text, c.fields, err, c.want)
		}
	}
	if tCount.Get(&vs) != 16 || len(tPoints.Get(&vs)) != 2 {
		t.Errorf("a value refused changed the value: %d, %v", tCount.Get(&vs), tPoints.Get(&vs))
	}
}

// TestFlags: a setting's flag parses into the Values, package flag
// wrapping a parser's error; a KeyOnly setting has no flag; the usage
// names each value by its doc's word in backquotes or its type, with the
// default.
func TestFlags(t *testing.T) {
	var vs Values
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vs.Flags(fs, tSettings)
	if err := fs.Parse([]string{"-name", "api", "-point", "1,2", "-point=3,4", "-quiet", "-every", "1m"}); err != nil {
		t.Fatal(err)
	}
	if tName.Get(&vs) != "api" || !tQuiet.Get(&vs) || len(tPoints.Get(&vs)) != 2 || tEvery.Get(&vs) != time.Minute {
		t.Errorf("values: %v", vs.m)
	}
	if fs.Lookup("title") != nil {
		t.Error("a KeyOnly setting has a flag")
	}
	err := fs.Parse([]string{"-count", "many"})
	if want := `invalid value "many" for flag -count: not an integer`; err == nil || err.Error() != want {
		t.Errorf("-count many: %v, want %q", err, want)
	}
	var out strings.Builder
	PrintDefaults(&out, fs)
	for _, want := range []string{
		"  -count int\n    \thow many (default 3)\n",
		"  -every duration\n    \thow often, | between (default 2s)\n",
		"  -name NAME\n    \tthe NAME (default \"anon\")\n",
		"  -quiet\n    \tsay less\n",
		"  -seed uint\n    \tthe seed\n",
		"  -point value\n    \ta point\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

// TestTable: a row per setting, in order: its key and flag, scope,
// default, reload, doc (backquotes dropped, | escaped).
func TestTable(t *testing.T) {
	want := "| setting | scope | default | reload | meaning |\n|---|---|---|---|---|\n" +
		"| `name`, `-name` | load balancer | `anon` | no | the NAME |\n" +
		"| `count`, `-count` | service | `3` | yes | how many |\n" +
		"| `every`, `-every` | health (needs check) | `2s` | no | how often, \\| between |\n" +
		"| `-quiet` | load balancer (flag) |  |  | say less |\n" +
		"| `points`, `-point` | service (own) |  | no | a point |\n" +
		"| `seed`, `-seed` | load balancer, decap |  | no | the seed |\n" +
		"| `title` | service (own) |  | no | the service's title |\n"
	if got := Table(tSettings); got != want {
		t.Errorf("Table:\n%s\nwant:\n%s", got, want)
	}
}

// TestError: an Error names its setting through wrapping, and reads as
// its message.
func TestError(t *testing.T) {
	err := fmt.Errorf("bad: %w", Errorf(tCount.Setting, "-count %d: at least 1", 0))
	if SettingOf(err) != tCount.Setting || err.Error() != "bad: -count 0: at least 1" {
		t.Errorf("%v: setting %v", err, SettingOf(err))
	}
	if SettingOf(errors.New("other")) != nil {
		t.Error("SettingOf a plain error is not nil")
	}
	if tPoints.KeyName() != "points" || tQuiet.KeyName() != "" || tName.KeyName() != "name" || !tPoints.List() || !tQuiet.IsBool() {
		t.Error("KeyName, List, IsBool")
	}
}

// TestShow: a default is shown as its value, a duration without its zero
// units.
func TestShow(t *testing.T) {
	for v, want := range map[any]string{
		120 * time.Second: "2m", 10 * time.Minute: "10m", 90 * time.Second: "1m30s", 5 * time.Second: "5s",
		8760 * time.Hour: "8760h", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 65537: "65537", "text": "text",
	} {
		if got := show(v); got != want {
			t.Errorf("show(%v) = %q, want %q", v, got, want)
		}
	}
}
