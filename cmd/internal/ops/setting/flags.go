package setting

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Flags defines on fs the flag of each setting of ss that has one, each
// parsing its text into vs (Set): an error is the parser's, which fs's
// Parse reports as "invalid value ... for flag -NAME: ...".
func (vs *Values) Flags(fs *flag.FlagSet, ss []*Setting) {
	for _, s := range ss {
		if s.KeyOnly {
			continue
		}
		fs.Var(flagValue{vs, s}, s.Name, s.Doc)
		fs.Lookup(s.Name).DefValue = s.Default
	}
}

// flagValue is a setting as a flag.Value.
type flagValue struct {
	vs *Values
	s  *Setting
}

func (f flagValue) String() string {
	if f.vs == nil || f.s == nil {
		return "" // the zero value, which package flag makes to tell defaults
	}
	if !f.vs.Given(f.s) {
		return f.s.Default
	}
	return f.vs.Format(f.s)
}

func (f flagValue) Set(text string) error { return f.vs.Set(f.s, text) }

func (f flagValue) IsBoolFlag() bool { return f.s != nil && f.s.isBool }

// PrintDefaults writes the usage of fs's flags to w, as fs.PrintDefaults
// does, a setting's value named by its doc's word in backquotes, or by
// its type.
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if fv, ok := f.Value.(flagValue); ok && !strings.Contains(f.Usage, "`") {
			name = fv.s.kind
		}
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "false" {
			if fv, ok := f.Value.(flagValue); ok && fv.s.kind == "string" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		_, _ = fmt.Fprintln(w, line)
	})
}
