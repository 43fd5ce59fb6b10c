package setting

import (
	"errors"
	"strconv"
	"time"
)

// The parsers of the plain types, for New: what package flag accepts for
// its flags of the same types, with errors that say what was wanted.

// String takes the text as it is.
func String(s string) (string, error) { return s, nil }

// Int parses an integer, in Go's syntax (decimal, or 0x, 0o, 0b).
func Int(s string) (int, error) {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return 0, numError(err, "an integer")
	}
	return int(n), nil
}

// Uint64 parses an unsigned integer, in Go's syntax.
func Uint64(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, numError(err, "an integer in [0, 18446744073709551615]")
	}
	return n, nil
}

// Duration parses a duration (time.ParseDuration: 300ms, 2s, 1m30s).
func Duration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration (300ms, 2s, 1m30s)")
	}
	return d, nil
}

// Bool parses a boolean (strconv.ParseBool: true, false, 1, 0, t, f).
func Bool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("not a boolean (true or false)")
	}
	return b, nil
}

func numError(err error, want string) error {
	if errors.Is(err, strconv.ErrRange) {
		return errors.New("out of range")
	}
	return errors.New("not " + want)
}

// kindOf names the type of v for -h, when a setting's doc names no value.
func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int:
		return "int"
	case uint64:
		return "uint"
	case time.Duration:
		return "duration"
	case bool:
		return ""
	}
	return "value"
}
