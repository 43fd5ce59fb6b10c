package xdpmaglev

import "errors"

// Errors returned by this package wrap one of these, so errors.Is matches
// them; their text starts with "xdpmaglev: ". A table that cannot be
// built also wraps the maglev package's error (maglev.ErrTooManyBackends,
// say).
var (
	// ErrOptions: an Options field out of range.
	ErrOptions = errors.New("xdpmaglev: bad options")
	// ErrInterface: the interface does not exist, or has no Ethernet address.
	ErrInterface = errors.New("xdpmaglev: bad interface")
	// ErrAttach: the program could not be attached in the mode asked for.
	ErrAttach = errors.New("xdpmaglev: cannot attach")
	// ErrService: a Service with an invalid VIP, a zero port or a protocol
	// other than TCP and UDP.
	ErrService = errors.New("xdpmaglev: bad service")
	// ErrBackend: a Backend with an invalid or repeated address, or a
	// hardware address that is not 6 bytes.
	ErrBackend = errors.New("xdpmaglev: bad backend")
	// ErrNoNeighbor: a Backend without HW whose address the interface's
	// neighbour table could not resolve.
	ErrNoNeighbor = errors.New("xdpmaglev: no neighbour entry")
	// ErrNoService: DeleteService of a service that is not set.
	ErrNoService = errors.New("xdpmaglev: no such service")
	// ErrFull: more services or backends than Options.MaxServices or
	// Options.MaxBackends.
	ErrFull = errors.New("xdpmaglev: too many services or backends")
	// ErrClosed: a method called after Close.
	ErrClosed = errors.New("xdpmaglev: closed")
)
