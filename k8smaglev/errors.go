package k8smaglev

import (
	"errors"
	"fmt"

	"github.com/maglevlb/maglev/membership"
)

var (
	// ErrInvalidConfig is wrapped by the errors Watch, ParseService and
	// RESTConfig return for a bad argument or option: a *ConfigError
	// naming it. It is membership.ErrInvalidConfig, which every membership
	// source's config errors wrap.
	ErrInvalidConfig = membership.ErrInvalidConfig

	// ErrList is wrapped by the error Watch returns when the first list
	// of the Service's EndpointSlices does not complete before its
	// context ends (the API server unreachable, the credentials refused,
	// RBAC missing). The error also wraps the
	// context's error and the API server's last error, if any, so that
	// errors.Is and k8s.io/apimachinery's apierrors.IsForbidden match them.
	ErrList = errors.New("k8smaglev: cannot list EndpointSlices")
)

// A ConfigError reports the argument or option that is wrong, and why:
// it is membership.ConfigError, the one config error of the membership
// sources. k8smaglev's (and k8sresolver's) have Package "k8smaglev", so
// their message starts with "k8smaglev: invalid config: " and names the
// field ("client", "Service.Name", "Service.Port", "set", "AddressType",
// ...); errors.Is matches them with ErrInvalidConfig and with the reason.
type ConfigError = membership.ConfigError

func configError(field, format string, args ...any) error {
	return &ConfigError{Package: "k8smaglev", Field: field, Err: fmt.Errorf(format, args...)}
}
