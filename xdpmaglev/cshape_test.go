package xdpmaglev

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// cMaxLines is the most lines a C function of bpf/ may take, its
// signature and closing brace included: the limit the Go code has.
const cMaxLines = 80

// TestCFunctionLength fails when a function of the BPF C (bpf/*.c and
// bpf/*.h) is longer than cMaxLines. katran_bench.c is ours (it includes
// Katran's program from a checkout at build time, and holds none of it),
// so it is held to the limit too.
func TestCFunctionLength(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("bpf", "*.[ch]"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range cFunctions(cTokens(string(src))) {
			found[f.name] = true
			if n := f.end - f.start + 1; n > cMaxLines {
				t.Errorf("%s:%d: %s is %d lines, more than %d: split it by concern into static __always_inline helpers", name, f.start, f.name, n, cMaxLines)
			}
		}
	}
	// The entry points, so that a tokenizer that finds nothing fails.
	for _, name := range []string{"xdp_maglev", "xdp_decap", "xdp_bench", "maglev", "parse", "forward_encap"} {
		if !found[name] {
			t.Errorf("no function %s found in bpf/", name)
		}
	}
}

// TestCFunctions checks the tokenizer and the function finder on small
// sources: braces in comments, strings, character literals and
// preprocessor lines are no braces; a struct, an initializer and a map
// are no functions; a function's lines run from its signature's first
// line (SEC included) to its closing brace.
func TestCFunctions(t *testing.T) {
	long := "static int long_one(void)\n{\n" + strings.Repeat("\tx++;\n", cMaxLines-2) + "}\n"
	for _, c := range []struct {
		name string
		src  string
		want []cFunc
	}{
		{"one", "int f(void)\n{\n\treturn 0;\n}\n", []cFunc{{"f", 1, 4}}},
		{"comments", "// {\n/* } { */\nint f(int a) // {\n{\n\treturn a; /* }} */\n}\n", []cFunc{{"f", 3, 6}}},
		{"strings", "static const char *g(void)\n{\n\treturn \"}\\\"{\";\n}\nint h(void) { return '{' + '\\''; }\n",
			[]cFunc{{"g", 1, 4}, {"h", 5, 5}}},
		{"preprocessor", "#define B(x) { x }\n#define C(x) \\\n\t{ x\nint f(void)\n{\n}\n", []cFunc{{"f", 4, 6}}},
		{"not functions", "struct s {\n\tint a;\n};\nstruct {\n\t__uint(type, 1);\n} m SEC(\".maps\");\nstruct s v = {\n\t.a = 1,\n};\nenum e { A, B };\n", nil},
		{"signature", "struct s;\n\n// doc\nSEC(\"xdp\")\nstatic __always_inline int f(struct s *a,\n\t\t\t\t    int b)\n{\n\tif (b) {\n\t\treturn 1;\n\t}\n\treturn 0;\n}\n",
			[]cFunc{{"f", 4, 12}}},
		{"attributes", "static __attribute__((always_inline, flatten)) int k(void)\n{\n}\n", []cFunc{{"k", 1, 3}}},
		{"long", long, []cFunc{{"long_one", 1, cMaxLines + 1}}},
	} {
		got := cFunctions(cTokens(c.src))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// A cToken is a token of C source as cFunctions reads it: a word (an
// identifier or a number), a string or character literal (its text
// dropped: its two quotes), or one character of punctuation; with its
// line.
// Comments and preprocessor lines are skipped.
type cToken struct {
	text string
	line int
}

// cTokens splits src into tokens.
func cTokens(src string) []cToken {
	var toks []cToken
	line := 1
	lineStart := true // nothing but blanks since the line began
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			lineStart = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case c == '#' && lineStart: // to the line's end, across continuations
			for i < len(src) && src[i] != '\n' {
				if src[i] == '\\' && i+1 < len(src) && src[i+1] == '\n' {
					line++
					i++
				}
				i++
			}
			continue
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				end = len(src) - i - 2
			}
			line += strings.Count(src[i:i+2+end], "\n")
			i += 2 + end + 2
			continue
		}
		lineStart = false
		switch {
		case c == '"' || c == '\'':
			start := line
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' && j+1 < len(src) {
					if src[j+1] == '\n' {
						line++
					}
					j++
				}
				j++
			}
			toks = append(toks, cToken{string([]byte{c, c}), start})
			i = j + 1
		case isCWord(c):
			j := i
			for j < len(src) && isCWord(src[j]) {
				j++
			}
			toks = append(toks, cToken{src[i:j], line})
			i = j
		default:
			toks = append(toks, cToken{string(c), line})
			i++
		}
	}
	return toks
}

func isCWord(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// A cFunc is a function definition: its name, and the lines of its first
// token (the signature's, a SEC(...) before it included) and of its
// closing brace.
type cFunc struct {
	name       string
	start, end int
}

// cFunctions finds the function definitions among toks: a brace at file
// scope that follows a closing parenthesis opens a function's body (a
// struct's, an enum's or an initializer's brace follows a name, a
// keyword or =). A definition starts after the previous ; or } at file
// scope.
func cFunctions(toks []cToken) []cFunc {
	var out []cFunc
	depth := 0
	begin := 0    // the first token after the last ; or } at file scope
	fn := cFunc{} // the function whose body is open, if fn.name != ""
	for i, tok := range toks {
		switch tok.text {
		case "{":
			if depth == 0 && i > 0 && toks[i-1].text == ")" {
				fn = cFunc{name: cFuncName(toks[begin:i]), start: toks[begin].line}
			}
			depth++
		case "}":
			depth--
			if depth == 0 {
				if fn.name != "" {
					fn.end = tok.line
					out = append(out, fn)
					fn = cFunc{}
				}
				begin = i + 1
			}
		case ";":
			if depth == 0 {
				begin = i + 1
			}
		}
	}
	return out
}

// cFuncName returns the name of the function whose signature is sig:
// the word before the parenthesis that the last one closes.
func cFuncName(sig []cToken) string {
	level := 0
	for i := len(sig) - 1; i >= 0; i-- {
		switch sig[i].text {
		case ")":
			level++
		case "(":
			level--
			if level == 0 && i > 0 {
				return sig[i-1].text
			}
		}
	}
	return "?"
}
