package k8smaglev

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig is wrapped by the errors Watch, ParseService and
	// RESTConfig return for a bad argument or option: a *ConfigError
	// naming it.
	ErrInvalidConfig = errors.New("k8smaglev: invalid config")

	// ErrList is wrapped by the error Watch returns when the first list
	// of the Service's EndpointSlices does not complete before its
	// context ends (the API server unreachable, the credentials refused,
	// RBAC missing). The error also wraps the
	// context's error and the API server's last error, if any, so that
	// errors.Is and k8s.io/apimachinery's apierrors.IsForbidden match them.
	ErrList = errors.New("k8smaglev: cannot list EndpointSlices")
)

// A ConfigError reports the argument or option that is wrong, and why.
// Its message starts with "k8smaglev: invalid config: " and names it;
// errors.Is matches it with ErrInvalidConfig and with its reason.
type ConfigError struct {
	Field string // the argument or option: "client", "Service.Name", "Service.Port", "set", "AddressType", ...
	Err   error  // the reason
}

// Error returns "k8smaglev: invalid config: FIELD: REASON".
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}
