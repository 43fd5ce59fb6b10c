package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bin is the maglev command, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "maglev-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory: best effort
	bin = filepath.Join(dir, "maglev")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building maglev: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// maglevCmd runs the built command with args and stdin, and returns its
// standard output, standard error and exit status.
func maglevCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		status = exit.ExitCode()
	default:
		t.Fatalf("maglev %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), status
}

func TestTopLevel(t *testing.T) {
	tests := []struct {
		args      []string
		status    int
		stdout    string // substring
		stderr    string // substring
		emptyOuts bool   // stdout must be empty
		emptyErrs bool   // stderr must be empty
	}{
		{args: nil, status: 2, stderr: "Subcommands:", emptyOuts: true},
		{args: []string{"-h"}, status: 0, stdout: "Subcommands:", emptyErrs: true},
		{args: []string{"help"}, status: 0, stdout: "compare", emptyErrs: true},
		{args: []string{"bogus"}, status: 2, stderr: `unknown subcommand "bogus"`, emptyOuts: true},
		{args: []string{"sim", "-h"}, status: 0, stdout: "SET_WEIGHT <name> <weight>", emptyErrs: true},
		{args: []string{"sim", "-nope"}, status: 2, stderr: "flag provided but not defined: -nope", emptyOuts: true},
		{args: []string{"sim", "extra"}, status: 2, stderr: `unexpected argument "extra"`, emptyOuts: true},
		{args: []string{"compare", "-h"}, status: 0, stdout: "-svg", emptyErrs: true},
		{args: []string{"compare", "-k", "x"}, status: 2, stderr: "invalid value", emptyOuts: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, stderr, status := maglevCmd(t, "", tt.args...)
			if status != tt.status {
				t.Errorf("exit status %d, want %d", status, tt.status)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout does not contain %q:\n%s", tt.stdout, stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.stderr, stderr)
			}
			if tt.emptyOuts && stdout != "" {
				t.Errorf("stdout = %q, want empty", stdout)
			}
			if tt.emptyErrs && stderr != "" {
				t.Errorf("stderr = %q, want empty", stderr)
			}
		})
	}
}
