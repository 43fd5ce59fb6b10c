package grpcmaglev

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev"
	"google.golang.org/grpc/serviceconfig"
)

// ErrInvalidConfig is wrapped by every error ParseConfig returns, so that
// callers can match a rejected policy config with errors.Is. An error about
// a bad tableSize also wraps maglev.ErrNotPrime or maglev.ErrTooLarge, and
// one about a bad balanceFactor wraps maglev.ErrBalanceFactor.
var ErrInvalidConfig = errors.New("maglev: invalid config")

// A ConfigError reports the field of the policy's service config that is
// wrong, and why. Its message starts with "maglev: invalid config: " and
// names the field as it is spelled in the JSON. A ConfigError is not
// changed after ParseConfig returns it, so it is safe for concurrent use.
type ConfigError struct {
	Field string // the JSON field: "tableSize", "requestHashHeader", ...; "" for the whole config
	Err   error  // the reason
}

// Error returns "maglev: invalid config: <field>: <reason>". It builds the
// string on each call.
func (e *ConfigError) Error() string {
	reason := strings.TrimPrefix(e.Err.Error(), "maglev: ")
	if e.Field == "" {
		return ErrInvalidConfig.Error() + ": " + reason
	}
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + reason
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// lbConfig is the parsed policy config. It is immutable once parsed, and so
// safe for concurrent use.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	header string  // lower-cased metadata key whose values are the key; "" for none
	size   int     // table size: a prime ≤ maglev.MaxSize
	seed   uint64  // XXH3 seed; 0 is the library's default hasher
	factor float64 // balanceFactor: 0 (bounded loads off), or finite and ≥ 1
}

// hasher returns the table hasher the config names.
func (c *lbConfig) hasher() maglev.Hasher { return maglev.XXH3Seed(c.seed) }

// sameTable reports whether c and o build the same table from the same
// endpoints.
func (c *lbConfig) sameTable(o *lbConfig) bool { return c.size == o.size && c.seed == o.seed }

// The config's fields, in the order errors about unknown ones list them.
const (
	fieldHeader = "requestHashHeader"
	fieldSize   = "tableSize"
	fieldSeed   = "seed"
	fieldFactor = "balanceFactor"
)

// parseConfig parses the policy's JSON config: an object whose fields are
// all optional (null means {}). Absent or null fields take their defaults; unknown fields
// are rejected, so that a config written for a later version of the policy
// fails loudly instead of being half applied. Every error is a *ConfigError
// naming the field. parseConfig takes O(len(js)) time plus O(√tableSize) to
// check that the size is prime.
func parseConfig(js json.RawMessage) (*lbConfig, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(js, &fields); err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("not a JSON object: %v", err)}
	}
	cfg := &lbConfig{size: maglev.DefaultSize}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad field reported is the same on every run
	for _, k := range keys {
		raw := fields[k]
		known := k == fieldHeader || k == fieldSize || k == fieldSeed || k == fieldFactor
		if known && string(raw) == "null" {
			continue
		}
		var err error
		switch k {
		case fieldHeader:
			cfg.header, err = parseHeader(raw)
		case fieldSize:
			cfg.size, err = parseSize(raw)
		case fieldSeed:
			cfg.seed, err = parseSeed(raw)
		case fieldFactor:
			cfg.factor, err = parseFactor(raw)
		default:
			err = fmt.Errorf("unknown field (known: %s, %s, %s, %s)", fieldFactor, fieldHeader, fieldSeed, fieldSize)
		}
		if err != nil {
			return nil, &ConfigError{Field: k, Err: err}
		}
	}
	return cfg, nil
}

// parseHeader parses requestHashHeader: a JSON string naming a metadata key,
// which is lower-cased and then must be a valid gRPC metadata key made of
// [0-9a-z-_.] that does not end in "-bin" (binary values are not keys), as
// grpc's ring_hash policy requires. Pseudo-headers (":path") are rejected:
// they are never in an RPC's outgoing metadata. The empty string means no
// header.
func parseHeader(raw json.RawMessage) (string, error) {
	var h string
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", fmt.Errorf("must be a JSON string, got %s", raw)
	}
	h = strings.ToLower(h)
	for i := 0; i < len(h); i++ {
		c := h[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
			return "", fmt.Errorf("%q is not a metadata key: byte %q is not in [0-9a-z-_.]", h, c)
		}
	}
	if strings.HasSuffix(h, "-bin") {
		return "", fmt.Errorf("%q is a binary metadata key (ends in \"-bin\")", h)
	}
	return h, nil
}

// parseSize parses tableSize: a JSON integer that is a prime no larger than
// maglev.MaxSize.
func parseSize(raw json.RawMessage) (int, error) {
	if !isJSONNumber(raw) {
		return 0, fmt.Errorf("must be a JSON number, got %s", raw)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	var numErr *strconv.NumError
	switch {
	case errors.As(err, &numErr) && numErr.Err == strconv.ErrRange && raw[0] != '-':
		return 0, fmt.Errorf("%w: %s > %d", maglev.ErrTooLarge, raw, maglev.MaxSize)
	case err != nil:
		return 0, fmt.Errorf("must be an integer, got %s", raw)
	case n > maglev.MaxSize:
		return 0, fmt.Errorf("%w: %d > %d", maglev.ErrTooLarge, n, maglev.MaxSize)
	case n < 2:
		return 0, fmt.Errorf("%w: %d", maglev.ErrNotPrime, n)
	}
	// An empty table costs O(√n) to check n, and allocates no slots.
	if _, err := maglev.New(nil, int(n), nil); err != nil {
		return 0, err
	}
	return int(n), nil
}

// parseSeed parses seed: a JSON integer from 0 to 2^64-1, read from its
// digits (so that seeds above 2^53 are exact).
func parseSeed(raw json.RawMessage) (uint64, error) {
	if !isJSONNumber(raw) {
		return 0, fmt.Errorf("must be a JSON number, got %s", raw)
	}
	s, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("must be an integer from 0 to %d, got %s", uint64(math.MaxUint64), raw)
	}
	return s, nil
}

// parseFactor parses balanceFactor: a JSON number that is 0 (bounded loads
// off) or finite and at least 1, as maglev.NewBounded requires. An error
// about its value wraps maglev.ErrBalanceFactor.
func parseFactor(raw json.RawMessage) (float64, error) {
	if !isJSONNumber(raw) {
		return 0, fmt.Errorf("must be a JSON number, got %s", raw)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	switch {
	case err != nil: // out of float64's range: JSON has no infinities
		return 0, fmt.Errorf("%w: %s", maglev.ErrBalanceFactor, raw)
	case f != 0 && !(f >= 1 && f <= math.MaxFloat64):
		return 0, fmt.Errorf("%w: %s", maglev.ErrBalanceFactor, raw)
	}
	return f, nil
}

// isJSONNumber reports whether raw, a valid JSON value, is a number.
func isJSONNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9')
}
