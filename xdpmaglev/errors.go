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
	// ErrClosed: a method called after Close or Release.
	ErrClosed = errors.New("xdpmaglev: closed")
	// ErrLayout: Options.PinPath holds pinned maps that this version of
	// the package cannot adopt: of another layout version (an upgrade
	// that changed the maps), left half made, or not xdpmaglev's.
	// Options.Rebuild replaces xdpmaglev's with new, empty ones.
	ErrLayout = errors.New("xdpmaglev: incompatible pinned maps")
	// ErrPinned: the maps pinned in Options.PinPath are of this layout,
	// but were made for other Options (ConntrackSize, MaxServices,
	// MaxBackends), another interface or network namespace, or another
	// attach mode. Options.Rebuild replaces them.
	ErrPinned = errors.New("xdpmaglev: pinned maps made otherwise")
	// ErrInUse: another LB, in this process or another, holds
	// Options.PinPath.
	ErrInUse = errors.New("xdpmaglev: pin directory in use")
	// ErrHandoff: a Handoff that names an invalid service, size, backend
	// or second hop, or whose JSON form is not one.
	ErrHandoff = errors.New("xdpmaglev: bad handoff")
	// ErrUnsupported: the kernel lacks what an option needs (the BPF
	// crypto kfuncs of an encrypted QUIC-LB configuration, Linux 6.10).
	ErrUnsupported = errors.New("xdpmaglev: not supported by the kernel")
)
