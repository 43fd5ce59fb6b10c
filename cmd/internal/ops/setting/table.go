package setting

import (
	"strings"
)

// Table returns the reference table of ss for the docs, in Markdown: a
// row per setting, in the order of ss, with its file key and flag, its
// scope, its default, whether a reload may change it, and its doc.
func Table(ss []*Setting) string {
	var b strings.Builder
	b.WriteString("| setting | scope | default | reload | meaning |\n|---|---|---|---|---|\n")
	for _, s := range ss {
		cells := []string{names(s), scopes(s), "", reload(s), cell(strings.ReplaceAll(s.Doc, "`", ""))}
		if s.Default != "" {
			cells[2] = "`" + s.Default + "`"
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// names is a setting's key and flag: "`backends`, `-backend`".
func names(s *Setting) string {
	switch {
	case s.KeyOnly:
		return "`" + s.KeyName() + "`"
	case s.FlagOnly || s.Scope == Decap:
		return "`-" + s.Name + "`"
	case s.KeyName() != s.Name:
		return "`" + s.KeyName() + "`, `-" + s.Name + "`"
	}
	return "`" + s.Name + "`, `-" + s.Name + "`"
}

// scopes is a setting's scope, with its second one, and what it is in a
// file: "service (own)", "source (needs etcd-prefix)", "load balancer,
// decap".
func scopes(s *Setting) string {
	out := string(s.Scope)
	if s.Own {
		out += " (own)"
	}
	if s.Needs != "" {
		out += " (needs " + s.Needs + ")"
	}
	if s.Also != "" {
		out += ", " + string(s.Also)
	}
	if s.FlagOnly && s.Scope != Decap {
		out += " (flag)"
	}
	return out
}

// reload says whether a reload may change the setting: "yes", "no", or
// "" for one that is no key of a file.
func reload(s *Setting) string {
	switch {
	case s.FlagOnly || s.Scope == Decap:
		return ""
	case s.Reload:
		return "yes"
	}
	return "no"
}

// cell escapes text for a Markdown table's cell.
func cell(text string) string { return strings.ReplaceAll(text, "|", `\|`) }
