package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/membership"
)

// StartTimeout bounds the first read of the membership from a source: a
// program that cannot read it at start fails, rather than serve with no
// backends.
const StartTimeout = 10 * time.Second

// A source is one kind of membership source: the settings that name and
// configure it (declared by the source, so that a program's flags, its
// configuration file and its docs take them from there), their checks,
// and its watch. A new kind is one file with a type that implements it,
// and its Kind and one row in registry.
type source interface {
	// settings are the source's settings, scope setting.Source.
	settings() []*setting.Setting
	// given reports whether vs names this source; name is the flag that
	// does ("-etcd").
	given(vs *setting.Values) bool
	name(vs *setting.Values) string
	// String says where the backends come from, for a status line:
	// "etcd prefix services/web".
	String(vs *setting.Values) string
	// check reports the error in the source's settings, or in settings of
	// its that are given without the one naming it: a setting.Error.
	check(vs *setting.Values) error
	// watch starts the source, calling set with each new list once the
	// first has been set; stop ends it. ctx bounds the first list.
	watch(ctx context.Context, vs *setting.Values, set func([]membership.Endpoint) error, opts WatchOptions) (stop func(), err error)
}

// WatchOptions are what a program tells its source beyond the flags.
type WatchOptions struct {
	// IPv6 asks a source that serves both families (a dual-stack
	// Kubernetes Service) for its IPv6 endpoints; else IPv4.
	IPv6 bool
	// Logger receives the source's warnings; nil means none.
	Logger *slog.Logger
}

// A Kind is a kind of membership source, or with |, several: the ones a
// program takes, whose settings it has.
type Kind uint

const (
	Etcd       Kind = 1 << iota // -etcd, -etcd-prefix
	DNS                         // -dns NAME:PORT, -dns-interval
	DNSSRV                      // -dns-srv NAME, -dns-interval: the targets are names
	Kubernetes                  // -k8s-service, -kubeconfig
	AllSources = Etcd | DNS | DNSSRV | Kubernetes
	// AddrSources are the kinds whose endpoints are IP addresses: what a
	// data plane (l4lb) takes. DNSSRV's targets are names.
	AddrSources = Etcd | DNS | Kubernetes
)

// registry makes the sources of kinds, in the order their settings are
// listed: a row per kind of source.
var registry = []struct {
	kinds Kind
	make  func(kinds Kind) source
}{
	{Etcd, func(Kind) source { return newEtcdSource() }},
	{DNS | DNSSRV, func(k Kind) source { return newDNSSource(k&DNS != 0, k&DNSSRV != 0) }},
	{Kubernetes, func(Kind) source { return newK8sSource() }},
}

// Sources are the membership sources of a program, of the kinds it
// takes, with their settings: -etcd with -etcd-prefix, -dns and -dns-srv
// with -dns-interval, -k8s-service with -kubeconfig. The settings' values
// are a setting.Values: at most one source may be named; Check says so.
type Sources struct {
	prog string // the program's name, for errors
	all  []source
	vs   *setting.Values
}

// NewSources returns the sources of kinds for the program prog, with no
// values yet (With gives them): its name and ": " start the errors of
// Check and Watch, unless it is "" (for a program that prefixes its errors
// itself). A kind not in kinds has no setting.
func NewSources(prog string, kinds Kind) *Sources {
	s := &Sources{prog: prog, vs: &setting.Values{}}
	for _, r := range registry {
		if kinds&r.kinds != 0 {
			s.all = append(s.all, r.make(kinds&r.kinds))
		}
	}
	return s
}

// Settings returns the settings of the sources, scope setting.Source.
func (s *Sources) Settings() []*setting.Setting {
	var out []*setting.Setting
	for _, src := range s.all {
		out = append(out, src.settings()...)
	}
	return out
}

// With returns the sources with the settings' values vs (one service's of
// a configuration file, in l4lb).
func (s *Sources) With(vs *setting.Values) *Sources {
	return &Sources{prog: s.prog, all: s.all, vs: vs}
}

// RegisterSources defines the flags of the sources of kinds on fs, for
// the program prog (see NewSources). A kind not in kinds has no flag, so
// the program's -h does not list it and its flag is refused as unknown.
func RegisterSources(fs *flag.FlagSet, prog string, kinds Kind) *Sources {
	s := NewSources(prog, kinds)
	s.vs.Flags(fs, s.Settings())
	return s
}

// ErrSources is wrapped by every error Check returns.
var ErrSources = errors.New("bad membership source")

// Check reports an error unless the settings name at most one source,
// each setting with the one it needs, and that one is not named together
// with static backends (static names the program's static flags,
// "-backend", if any were given; "" if none). The error wraps ErrSources
// and a setting.Error naming the setting at fault.
func (s *Sources) Check(static string) error {
	var named []source
	for _, src := range s.all {
		if err := src.check(s.vs); err != nil {
			return s.errorf("%w: %w", ErrSources, err)
		}
		if src.given(s.vs) {
			named = append(named, src)
		}
	}
	switch {
	case len(named) > 1:
		var names []string
		for _, src := range named {
			names = append(names, src.name(s.vs))
		}
		return s.errorf("%w: %w", ErrSources, setting.Errorf(s.setting(named[0]), "%s: use one source of backends", strings.Join(names, " and ")))
	case len(named) == 1 && static != "":
		return s.errorf("%w: %w", ErrSources, setting.Errorf(s.setting(named[0]), "%s cannot be used with %s", named[0].name(s.vs), static))
	}
	return nil
}

// setting returns the setting that names src.
func (s *Sources) setting(src source) *setting.Setting {
	name := strings.TrimPrefix(src.name(s.vs), "-")
	for _, st := range src.settings() {
		if st.Name == name {
			return st
		}
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

// Dynamic reports whether the settings name a source: the backends come
// from it, after the program starts.
func (s *Sources) Dynamic() bool { return s.named() != nil }

// String says where the backends come from ("etcd prefix services/web",
// "Kubernetes service prod/web:http"), or "" with no source named.
func (s *Sources) String() string {
	if src := s.named(); src != nil {
		return src.String(s.vs)
	}
	return ""
}

// Name returns the flag of the named source ("-etcd"), or "".
func (s *Sources) Name() string {
	if src := s.named(); src != nil {
		return src.name(s.vs)
	}
	return ""
}

func (s *Sources) named() source {
	for _, src := range s.all {
		if src.given(s.vs) {
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
	stop, err = src.watch(ctx, s.vs, set, opts)
	if err != nil {
		return nil, s.errorf("%s: %w", src.name(s.vs), err)
	}
	return stop, nil
}
