package config

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// syntaxError returns the error yaml.v3 found in the file b, which is not
// YAML, as "LINE: problem", LINE the line that has the problem.
//
// yaml.v3 says "line N: problem", N the line of the problem's context (the
// collection or scalar being read, which may start lines before), counted
// from 1 for the scanner's problems (a character that cannot start a
// token, a tab) but from 0 for the parser's (its fail reports
// yaml_parser_t's mark without adding 1): for those, listed in
// parserProblems, the context's line is N+1. The problem is at that line
// or after it: the first line such that the file up to it has the same
// problem. It costs a parse of the file's first lines for each line from
// the context's to the problem's, and only when the file is not YAML.
func syntaxError(b []byte, err error) error {
	line, problem := yamlLine(err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	for k := max(line, 1); k <= len(lines); k++ {
		var n yaml.Node
		if err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n); err != nil {
			if _, p := yamlLine(err); p == problem {
				line = k
				break
			}
		}
	}
	return fmt.Errorf("%d: %s", max(line, 1), problem)
}

// yamlLine returns the line of yaml.v3's error err, counted from 1 (0 if
// it names none), and its problem.
func yamlLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	l, problem, ok := strings.Cut(strings.TrimPrefix(msg, "line "), ": ")
	n, nerr := strconv.Atoi(l)
	if !ok || !strings.HasPrefix(msg, "line ") || nerr != nil {
		return 0, msg
	}
	if slices.Contains(parserProblems, problem) {
		n++
	}
	return n, problem
}

// parserProblems are the problems yaml.v3's parser (parserc.go) reports,
// whose line it counts from 0; its scanner's, counted from 1, are others.
var parserProblems = []string{
	"did not find expected <stream-start>", "did not find expected <document start>", "did not find expected node content",
	"did not find expected key", "did not find expected '-' indicator", "did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"found duplicate %YAML directive", "found incompatible YAML document", "found duplicate %TAG directive", "found undefined tag handle",
}
