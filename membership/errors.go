package membership

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig is wrapped by every *ConfigError: the errors Watch,
	// WatchDNS and WatchSRV return for a bad argument or option, and those
	// of the other membership sources (etcdmaglev's and k8smaglev's
	// ErrInvalidConfig is this one).
	ErrInvalidConfig = errors.New("membership: invalid config")

	// ErrDNS is wrapped by the error WatchDNS and WatchSRV return when the
	// first lookup fails or names no backend, and by the errors a DNS
	// watcher logs for the later ones. A failure of the set function is
	// not a DNS failure: it does not wrap ErrDNS.
	ErrDNS = errors.New("membership: DNS lookup failed")
)

// A ConfigError reports the argument or option that is wrong, and why. It
// is the one config error of the membership sources: etcdmaglev's and
// k8smaglev's ConfigError is this type, with their name in Package. Its
// message starts with "PACKAGE: invalid config: " and names the field;
// errors.Is matches it with ErrInvalidConfig and with its reason.
type ConfigError struct {
	Package string // the package that reports it, which starts the message: "etcdmaglev", "k8smaglev"; "" is "membership"
	Field   string // the argument or option: "src", "set", "hostport", "name", "Interval", ...
	Err     error  // the reason
}

// Error returns "PACKAGE: invalid config: FIELD: REASON".
func (e *ConfigError) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "membership"
	}
	return pkg + ": invalid config: " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}
