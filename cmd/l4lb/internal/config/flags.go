package config

import (
	"errors"
	"flag"
	"fmt"
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

// Meant returns the command line args, a command line whose first
// argument is a flag (the form before commands), stand for: a mode flag
// anywhere (-decap, -detach, -version) names its command, in its place;
// any other flag names l4lb run (l4lb -config FILE is l4lb run -config
// FILE); quoted for a shell where an argument needs it.
func Meant(args []string) string {
	meant := []string{"l4lb", "run"}
	for _, a := range args {
		switch mode := strings.TrimLeft(a, "-"); mode {
		case "decap", "detach", "version", "decap=true", "detach=true", "version=true":
			meant[1] = strings.TrimSuffix(mode, "=true")
			continue
		}
		meant = append(meant, a)
	}
	if meant[1] == "version" {
		meant = meant[:2] // l4lb version takes no flags
	}
	return shellJoin(meant)
}

// shellJoin joins args into a command line a shell reads back, each
// argument that is empty or holds a character a shell reads quoted.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?[]{}()<>|&;#~!") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
