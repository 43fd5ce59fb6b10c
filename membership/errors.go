package membership

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig is wrapped by the errors Watch, WatchDNS and
	// WatchSRV return for a bad argument or option: a *ConfigError naming
	// it.
	ErrInvalidConfig = errors.New("membership: invalid config")

	// ErrDNS is wrapped by the error WatchDNS and WatchSRV return when the
	// first lookup fails or names no backend, and by the errors a DNS
	// watcher logs for the later ones. A failure of the set function is
	// not a DNS failure: it does not wrap ErrDNS.
	ErrDNS = errors.New("membership: DNS lookup failed")
)

// A ConfigError reports the argument or option that is wrong, and why.
// Its message starts with "membership: invalid config: " and names it;
// errors.Is matches it with ErrInvalidConfig and with its reason.
type ConfigError struct {
	Field string // the argument or option: "src", "set", "hostport", "name", "Interval"
	Err   error  // the reason
}

// Error returns "membership: invalid config: FIELD: REASON".
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}
