package config

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
)

// The command lines: each command's flags are the settings of its scopes
// (RunFlags, DecapFlags, DetachFlags), parsed into a setting.Values by
// the caller's flag.FlagSet, then built and checked (BuildRun,
// BuildDecap, BuildDetach) as a configuration file's are.

// runSettings are l4lb run's flags: every setting of the load balancer
// and of a service, but a service's name.
var runSettings = filter(func(s *setting.Setting) bool {
	return !s.KeyOnly && (s.Scope == setting.LB || s.Scope == setting.Service || s.Scope == setting.Source || s.Scope == setting.Health)
})

// decapSettings are l4lb decap's flags.
var decapSettings = filter(func(s *setting.Setting) bool { return s.Scope == setting.Decap || s.Also == setting.Decap })

// detachSettings are l4lb detach's flags.
var detachSettings = []*setting.Setting{iface.Setting, pinDir.Setting}

func filter(keep func(*setting.Setting) bool) []*setting.Setting {
	var out []*setting.Setting
	for _, s := range table {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// RunFlags defines l4lb run's flags on fs, and returns the values they
// parse into, for BuildRun.
func RunFlags(fs *flag.FlagSet) *setting.Values { return flags(fs, runSettings) }

// DecapFlags defines l4lb decap's flags on fs, and returns the values they
// parse into, for BuildDecap.
func DecapFlags(fs *flag.FlagSet) *setting.Values { return flags(fs, decapSettings) }

// DetachFlags defines l4lb detach's flags on fs, and returns the values
// they parse into, for BuildDetach.
func DetachFlags(fs *flag.FlagSet) *setting.Values { return flags(fs, detachSettings) }

func flags(fs *flag.FlagSet, ss []*setting.Setting) *setting.Values {
	vs := &setting.Values{}
	vs.Flags(fs, ss)
	return vs
}

// Run is l4lb run's command line: the load balancer's settings and its
// one service's (named "default"), or, with -config, the file the
// settings come from (Global.File) and -rebuild (Global.Pin.Rebuild).
type Run struct {
	Global
	Service Service
}

// BuildRun returns l4lb run's command line of the flags vs parsed.
func BuildRun(vs *setting.Values) (Run, error) {
	if file := configFile.Get(vs); file != "" {
		for _, s := range runSettings {
			if vs.Given(s) && s != configFile.Setting && s != rebuild.Setting { // -rebuild is a one-off, not in the file
				return Run{}, errors.New("-config takes no other flag: the file has every setting")
			}
		}
		return Run{Global: Global{File: file, Pin: Pin{Rebuild: rebuild.Get(vs)}}}, nil
	}
	g, err := buildGlobal(vs)
	if err != nil {
		return Run{}, err
	}
	svc, warnings, err := buildService(vs, g, "default")
	if err != nil {
		return Run{}, err
	}
	g.Warnings = warnings
	return Run{Global: g, Service: svc}, nil
}

// BuildDecap returns l4lb decap's configuration of the flags vs parsed;
// cmd is the command its errors name.
func BuildDecap(vs *setting.Values, cmd string) (Decap, error) { return buildDecap(vs, cmd) }

// Detach is l4lb detach's command line.
type Detach struct {
	Iface, PinDir string
}

// BuildDetach returns l4lb detach's command line of the flags vs parsed;
// cmd is the command its errors name.
func BuildDetach(vs *setting.Values, cmd string) (Detach, error) {
	d := Detach{Iface: iface.Get(vs), PinDir: pinDir.Get(vs)}
	switch {
	case d.Iface == "":
		return d, fmt.Errorf("%s needs -iface", cmd)
	case d.PinDir == "":
		return d, fmt.Errorf("%s needs the -pin-dir l4lb ran with", cmd)
	}
	return d, nil
}

// Legacy reads a command line of the form before subcommands, its first
// argument a flag: l4lb -config FILE, l4lb -iface DEV -vip VIP:PORT ...,
// l4lb -decap ..., l4lb -detach ..., l4lb -version. It returns the
// command it means ("run", "decap", "detach" or "version") and the
// arguments of that command, and refuses what that form refused: the
// load balancer's flags with -decap, -decap-sources without it, anything
// but -iface and -pin-dir with -detach. fs is the flag set to parse with
// (its output and usage the caller's): Legacy defines every command's
// flags on it.
func Legacy(args []string, fs *flag.FlagSet) (cmd string, cmdArgs []string, err error) {
	var rec []recorded
	for _, s := range concat(runSettings, decapSettings) {
		if fs.Lookup(s.Name) == nil {
			fs.Var(recorder{s.Name, s.IsBool(), &rec}, s.Name, s.Doc)
		}
	}
	for _, m := range []string{"decap", "detach", "version"} {
		fs.Var(recorder{m, true, &rec}, m, "l4lb "+m+" (deprecated: the command l4lb "+m+")")
	}
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	modes, set := map[string]bool{}, map[string]bool{}
	var rest []string
	for _, r := range rec {
		switch r.name {
		case "decap", "detach", "version":
			modes[r.name], _ = strconv.ParseBool(r.value)
		default:
			set[r.name] = true
			rest = append(rest, "-"+r.name+"="+r.value)
		}
	}
	switch {
	case modes["version"]:
		return "version", nil, nil // whatever else the command line says
	case fs.NArg() > 0:
		return "", nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case modes["detach"]:
		return "detach", rest, onlyDetach(set)
	case modes["decap"]:
		return "decap", rest, onlyDecap(set)
	case set[decapSources.Name]:
		return "", nil, errors.New("-decap-sources needs -decap")
	}
	return "run", rest, nil
}

// onlyDetach refuses any flag of set but detach's.
func onlyDetach(set map[string]bool) error {
	var other []string
	for name := range set {
		if name != iface.Name && name != pinDir.Name {
			other = append(other, "-"+name)
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		return fmt.Errorf("-detach takes -iface and -pin-dir only, not %s", strings.Join(other, ", "))
	}
	return nil
}

// onlyDecap refuses the load balancer's flags of set.
func onlyDecap(set map[string]bool) error {
	var bad []string
	for _, s := range runSettings {
		if set[s.Name] && !slices.ContainsFunc(decapSettings, func(d *setting.Setting) bool { return d.Name == s.Name }) {
			bad = append(bad, "-"+s.Name)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("-decap cannot be used with %s: a backend's decapsulator does not load-balance", strings.Join(bad, ", "))
	}
	return nil
}

// recorded is a flag of a command line as given.
type recorded struct{ name, value string }

// recorder is a flag that records its values, in order, for Legacy.
type recorder struct {
	name   string
	isBool bool
	rec    *[]recorded
}

func (r recorder) String() string { return "" }

func (r recorder) Set(v string) error {
	*r.rec = append(*r.rec, recorded{r.name, v})
	return nil
}

func (r recorder) IsBoolFlag() bool { return r.isBool }
