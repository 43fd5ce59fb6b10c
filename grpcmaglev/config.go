package grpcmaglev

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"github.com/maglevlb/maglev/envoymaglev"
	"google.golang.org/grpc/serviceconfig"
)

// ErrInvalidConfig is wrapped by every error the policy's config parser
// returns, so that a caller of the parser can match a rejected config with
// errors.Is. An error about a bad tableSize also wraps maglev.ErrSize or
// maglev.ErrSize, and one about a bad balanceFactor wraps
// bounded.ErrBalanceFactor. grpc calls the parser when it parses a service
// config (grpc.NewClient for the default one) and passes its error on as
// text: the message names the field, but errors.Is cannot see
// ErrInvalidConfig through grpc's error. A caller gets the parser with
// balancer.Get(Name).(balancer.ConfigParser).
var ErrInvalidConfig = errors.New("grpcmaglev: invalid config")

// A ConfigError reports the field of the policy's service config that is
// wrong, and why. Its message starts with "grpcmaglev: invalid config: " and
// names the field as it is spelled in the JSON. A ConfigError is not
// changed after the parser returns it, so it is safe for concurrent use.
type ConfigError struct {
	Field string // the JSON field: "tableSize", "requestHashHeader", ...; "" for the whole config
	Err   error  // the reason
}

// Error returns "grpcmaglev: invalid config: <field>: <reason>", where a
// reason from package maglev or bounded loses its "maglev: " or
// "bounded: " prefix. It builds the string on each call.
func (e *ConfigError) Error() string {
	reason := strings.TrimPrefix(strings.TrimPrefix(e.Err.Error(), "maglev: "), "bounded: ")
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
	envoy  bool    // envoyCompatible: Envoy's table and request hash (envoymaglev)
}

// newTable builds the table the config names over the usable endpoints:
// maglev.NewWeighted with XXH3 and the config's seed, or, with
// envoyCompatible, envoymaglev.New, whose table hashes keys with XXH64 as
// Envoy's header hash policy does. Envoy's table takes no weight 0:
// rebuildTableLocked leaves the drained endpoints out of it, as Envoy
// leaves out a drained host.
func (c *lbConfig) newTable(usable []maglev.Backend) (*maglev.Table, error) {
	if !c.envoy {
		return maglev.NewWeighted(usable, c.size, maglev.XXH3Seed(c.seed))
	}
	return envoymaglev.NewTable(usable, c.size)
}

// sameTable reports whether c and o build the same table from the same
// endpoints.
func (c *lbConfig) sameTable(o *lbConfig) bool {
	return c.size == o.size && c.seed == o.seed && c.envoy == o.envoy
}

// jsonConfig is the policy's JSON config as encoding/json decodes it. The
// numbers are kept as their literals, so that parseConfig reads integers
// exactly from their digits; an absent or null field is "".
type jsonConfig struct {
	RequestHashHeader string `json:"requestHashHeader"`
	TableSize         number `json:"tableSize"`
	Seed              number `json:"seed"`
	BalanceFactor     number `json:"balanceFactor"`
	EnvoyCompatible   *bool  `json:"envoyCompatible"`
}

// The config's fields, as spelled in the JSON and listed in the error
// about an unknown one.
const (
	fieldHeader = "requestHashHeader"
	fieldSize   = "tableSize"
	fieldSeed   = "seed"
	fieldFactor = "balanceFactor"
	fieldEnvoy  = "envoyCompatible"
)

// errUnknownField is the reason given for a field the config does not have.
var errUnknownField = fmt.Errorf("unknown field (known: %s, %s, %s, %s, %s)", fieldFactor, fieldEnvoy, fieldHeader, fieldSeed, fieldSize)

// errEnvoySeed is the reason given for a seed with envoyCompatible: Envoy
// hashes with XXH64 and no seed of ours.
var errEnvoySeed = errors.New("must be 0 or absent with envoyCompatible, whose hash is Envoy's XXH64")

// A number is a JSON number's literal, like json.Number, but decoding
// anything else into it, a string among them, is an *json.UnmarshalTypeError
// (json.Number takes a string that holds a number). null leaves it as it
// is.
type number string

// UnmarshalJSON stores the literal js if it is a number, does nothing if it
// is null, and otherwise returns a *json.UnmarshalTypeError, which the
// decoder completes with the field's name.
func (n *number) UnmarshalJSON(js []byte) error {
	switch c := js[0]; {
	case c == '-' || '0' <= c && c <= '9':
		*n = number(js)
	case c != 'n':
		return &json.UnmarshalTypeError{Value: jsonKind(js), Type: reflect.TypeFor[number]()}
	}
	return nil
}

// jsonKind names the kind of the valid JSON value js, as
// json.UnmarshalTypeError.Value does.
func jsonKind(js []byte) string {
	switch js[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// ignored is a JSON value decoded only to be skipped.
type ignored struct{}

// UnmarshalJSON does nothing.
func (*ignored) UnmarshalJSON([]byte) error { return nil }

// parseConfig parses the policy's JSON config: an object whose fields are
// all optional (null means {}). Absent or null fields take their defaults;
// unknown fields are rejected, so that a config written for a later
// version of the policy fails loudly instead of being half applied. Every
// error is a *ConfigError naming the field.
//
// encoding/json matches a field name to a struct field without regard to
// case, even with Decoder.DisallowUnknownFields, so that "tablesize" would
// set tableSize. parseConfig therefore decodes js twice: for its field
// names, which must be exactly the config's, then into a jsonConfig. Each
// decode is O(len(js)); checking the table size is O(√tableSize).
// parseConfig allocates the parsed config and the decoders' state.
func parseConfig(js json.RawMessage) (*lbConfig, error) {
	var fields map[string]ignored
	if err := json.Unmarshal(js, &fields); err != nil {
		return nil, decodeError(err)
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) { // the same first bad field on every run
		if k != fieldHeader && k != fieldSize && k != fieldSeed && k != fieldFactor && k != fieldEnvoy {
			return nil, &ConfigError{Field: k, Err: errUnknownField}
		}
	}
	var jc jsonConfig
	if err := json.Unmarshal(js, &jc); err != nil {
		return nil, decodeError(err)
	}

	cfg := &lbConfig{size: maglev.DefaultSize}
	var err error
	if cfg.header, err = parseHeader(jc.RequestHashHeader); err != nil {
		return nil, &ConfigError{Field: fieldHeader, Err: err}
	}
	if jc.TableSize != "" {
		if cfg.size, err = parseSize(jc.TableSize); err != nil {
			return nil, &ConfigError{Field: fieldSize, Err: err}
		}
	}
	if jc.Seed != "" {
		if cfg.seed, err = parseSeed(jc.Seed); err != nil {
			return nil, &ConfigError{Field: fieldSeed, Err: err}
		}
	}
	if jc.BalanceFactor != "" {
		if cfg.factor, err = parseFactor(jc.BalanceFactor); err != nil {
			return nil, &ConfigError{Field: fieldFactor, Err: err}
		}
	}
	if jc.EnvoyCompatible != nil {
		cfg.envoy = *jc.EnvoyCompatible
	}
	if cfg.envoy && cfg.seed != 0 {
		return nil, &ConfigError{Field: fieldSeed, Err: errEnvoySeed}
	}
	return cfg, nil
}

// decodeError turns an error of json.Unmarshal on a config into a
// *ConfigError: a value of the wrong type (a *json.UnmarshalTypeError)
// names its field; anything else (a syntax error, data after the value, a
// value that is not an object) is about the whole config.
func decodeError(err error) *ConfigError {
	var te *json.UnmarshalTypeError
	switch {
	case !errors.As(err, &te):
		return &ConfigError{Err: fmt.Errorf("not a JSON object: %v", err)}
	case te.Field == "":
		return &ConfigError{Err: fmt.Errorf("not a JSON object: got a JSON %s", te.Value)}
	}
	want := "number"
	switch te.Type {
	case reflect.TypeFor[string]():
		want = "string"
	case reflect.TypeFor[bool]():
		want = "bool"
	}
	return &ConfigError{Field: te.Field, Err: fmt.Errorf("must be a JSON %s, got a JSON %s", want, te.Value)}
}

// parseHeader parses requestHashHeader: a metadata key, which is
// lower-cased and then must be a valid gRPC metadata key made of
// [0-9a-z-_.] that does not end in "-bin" (binary values are not keys), as
// grpc's ring_hash policy requires. Pseudo-headers (":path") are rejected:
// they are never in an RPC's outgoing metadata. The empty string means no
// header.
func parseHeader(h string) (string, error) {
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

// parseSize parses tableSize: an integer that is a supported table size
// (maglev.CheckSize), a prime no larger than maglev.MaxSize.
func parseSize(n number) (int, error) {
	m, err := strconv.ParseInt(string(n), 10, 64)
	var numErr *strconv.NumError
	switch {
	case errors.As(err, &numErr) && numErr.Err == strconv.ErrRange:
		if m < 0 {
			return 0, fmt.Errorf("%w: %s", maglev.ErrSize, n)
		}
		return 0, fmt.Errorf("%w: %s > %d", maglev.ErrSize, n, maglev.MaxSize)
	case err != nil:
		return 0, fmt.Errorf("must be an integer, got %s", n)
	case m > maglev.MaxSize: // before int(m), which may be 32 bits
		return 0, fmt.Errorf("%w: %d > %d", maglev.ErrSize, m, maglev.MaxSize)
	}
	if err := maglev.CheckSize(int(m)); err != nil {
		return 0, err
	}
	return int(m), nil
}

// parseSeed parses seed: an integer from 0 to 2^64-1, read from its
// digits, so that seeds above 2^53 are exact.
func parseSeed(n number) (uint64, error) {
	s, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("must be an integer from 0 to %d, got %s", uint64(math.MaxUint64), n)
	}
	return s, nil
}

// parseFactor parses balanceFactor: a number that is 0 (bounded loads off)
// or finite and at least 1, as bounded.New requires. An error about
// its value wraps bounded.ErrBalanceFactor.
func parseFactor(n number) (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != 0 && !(f >= 1 && f <= math.MaxFloat64) { // out of float64's range: JSON has no infinities
		return 0, fmt.Errorf("%w: %s", bounded.ErrBalanceFactor, n)
	}
	return f, nil
}
