package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/maglevlb/maglev/membership"
)

// StartTimeout bounds the first read of the membership from a source: a
// program that cannot read it at start fails, rather than serve with no
// backends.
const StartTimeout = 10 * time.Second

// A source is one kind of membership source: the flags that name and
// configure it, their checks, and its watch. A new kind is one file with
// a type that implements it, and one line in newSources.
type source interface {
	// register defines the source's flags on fs.
	register(fs *flag.FlagSet)
	// given reports whether the flags name this source; name is the flag
	// that does ("-etcd").
	given() bool
	name() string
	// String says where the backends come from, for a status line:
	// "etcd prefix services/web".
	String() string
	// check reports the error in the source's flags, or in flags of
	// its that are given without the one naming it.
	check() error
	// watch starts the source, calling set with each new list once the
	// first has been set; stop ends it. ctx bounds the first list.
	watch(ctx context.Context, set func([]membership.Endpoint) error, opts WatchOptions) (stop func(), err error)
}

// WatchOptions are what a program tells its source beyond the flags.
type WatchOptions struct {
	// IPv6 asks a source that serves both families (a dual-stack
	// Kubernetes Service) for its IPv6 endpoints; else IPv4.
	IPv6 bool
	// Logger receives the source's warnings; nil means none.
	Logger *slog.Logger
}

// Sources are the membership-source flags of a program, of the kinds it
// takes: -etcd with -etcd-prefix, -dns and -dns-srv with -dns-interval,
// -k8s-service with -kubeconfig. At most one source may be named; Check
// says so.
type Sources struct {
	prog string // the program's name, for errors
	all  []source
}

// A Kind is a kind of membership source, or with |, several: the ones a
// program takes, whose flags RegisterSources defines.
type Kind uint

const (
	Etcd       Kind = 1 << iota // -etcd, -etcd-prefix
	DNS                         // -dns NAME:PORT, -dns-interval
	DNSSRV                      // -dns-srv NAME, -dns-interval: the targets are names
	Kubernetes                  // -k8s-service, -kubeconfig

	AllSources = Etcd | DNS | DNSSRV | Kubernetes
)

// newSources returns the sources of kinds, in the order their flags are
// listed.
func newSources(kinds Kind) []source {
	var out []source
	if kinds&Etcd != 0 {
		out = append(out, &etcdSource{})
	}
	if kinds&(DNS|DNSSRV) != 0 {
		out = append(out, &dnsSource{a: kinds&DNS != 0, srv: kinds&DNSSRV != 0})
	}
	if kinds&Kubernetes != 0 {
		out = append(out, &k8sSource{})
	}
	return out
}

// RegisterSources defines the flags of the sources of kinds on fs, for
// the program prog: its name and ": " start the errors of Check and
// Watch, unless it is "" (for a program that prefixes its errors itself).
// A kind not in kinds has no flag, so the program's -h does not list it
// and its flag is refused as unknown.
func RegisterSources(fs *flag.FlagSet, prog string, kinds Kind) *Sources {
	s := &Sources{prog: prog, all: newSources(kinds)}
	for _, src := range s.all {
		src.register(fs)
	}
	return s
}

// ErrSources is wrapped by every error Check returns.
var ErrSources = errors.New("bad membership source")

// Check reports an error unless the flags name at most one source, each
// flag with the one it needs, and that one is not named together with
// static backends (static names the program's static flags, "-backend",
// if any were given; "" if none).
func (s *Sources) Check(static string) error {
	var named []string
	for _, src := range s.all {
		if err := src.check(); err != nil {
			return s.errorf("%w: %w", ErrSources, err)
		}
		if src.given() {
			named = append(named, src.name())
		}
	}
	switch {
	case len(named) > 1:
		return s.errorf("%w: %s: use one source of backends", ErrSources, strings.Join(named, " and "))
	case len(named) == 1 && static != "":
		return s.errorf("%w: %s cannot be used with %s", ErrSources, named[0], static)
	}
	return nil
}

// errorf is fmt.Errorf with the program's name and ": " first, if it has
// one.
func (s *Sources) errorf(format string, args ...any) error {
	if s.prog != "" {
		format = s.prog + ": " + format
	}
	return fmt.Errorf(format, args...)
}

// Dynamic reports whether the flags name a source: the backends come
// from it, after the program starts.
func (s *Sources) Dynamic() bool { return s.named() != nil }

// String says where the backends come from ("etcd prefix services/web",
// "Kubernetes service prod/web:http"), or "" with no source named.
func (s *Sources) String() string {
	if src := s.named(); src != nil {
		return src.String()
	}
	return ""
}

// Name returns the flag of the named source ("-etcd"), or "".
func (s *Sources) Name() string {
	if src := s.named(); src != nil {
		return src.name()
	}
	return ""
}

func (s *Sources) named() source {
	for _, src := range s.all {
		if src.given() {
			return src
		}
	}
	return nil
}

// Watch starts the named source (Check first), which calls set with each
// membership list once the first, read within StartTimeout, has been set;
// stop ends it. With no source named it does nothing. While the source
// cannot be reached the last list stays (membership.Watcher's promise).
func (s *Sources) Watch(ctx context.Context, set func([]membership.Endpoint) error, opts WatchOptions) (stop func(), err error) {
	src := s.named()
	if src == nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	stop, err = src.watch(ctx, set, opts)
	if err != nil {
		return nil, s.errorf("%s: %w", src.name(), err)
	}
	return stop, nil
}
