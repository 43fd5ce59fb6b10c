package ops

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/membership"
)

// dnsSource is -dns NAME:PORT (the A/AAAA records of NAME) or -dns-srv
// NAME (its lowest-priority SRV records), looked up every -dns-interval;
// a program takes -dns, -dns-srv or both (hostport or srvName nil for
// the one it does not).
type dnsSource struct {
	hostport, srvName *setting.Of[string]
	interval          setting.Of[time.Duration]
}

func newDNSSource(a, srv bool) *dnsSource {
	d := &dnsSource{}
	var which []string
	if a {
		s := setting.New(setting.Setting{Name: "dns", Scope: setting.Source, Own: true, Reload: true,
			Doc: "backends are the A/AAAA records of `NAME:PORT`, looked up every -dns-interval"}, "", setting.String)
		d.hostport = &s
		which = append(which, "-dns")
	}
	if srv {
		s := setting.New(setting.Setting{Name: "dns-srv", Scope: setting.Source, Own: true, Reload: true,
			Doc: "backends are the lowest-priority SRV records of `NAME`, looked up every -dns-interval"}, "", setting.String)
		d.srvName = &s
		which = append(which, "-dns-srv")
	}
	d.interval = setting.New(setting.Setting{Name: "dns-interval", Scope: setting.Source, Needs: strings.TrimPrefix(which[0], "-"), Reload: true,
		Doc: "time between DNS lookups of " + strings.Join(which, " or ")}, 5*time.Second, setting.Duration)
	return d
}

func (d *dnsSource) settings() []*setting.Setting {
	var out []*setting.Setting
	for _, s := range []*setting.Of[string]{d.hostport, d.srvName} {
		if s != nil {
			out = append(out, s.Setting)
		}
	}
	return append(out, d.interval.Setting)
}

// values returns the name:port and the SRV name given ("" if not).
func (d *dnsSource) values(vs *setting.Values) (hostport, srvName string) {
	if d.hostport != nil {
		hostport = d.hostport.Get(vs)
	}
	if d.srvName != nil {
		srvName = d.srvName.Get(vs)
	}
	return hostport, srvName
}

func (d *dnsSource) given(vs *setting.Values) bool {
	hostport, srvName := d.values(vs)
	return hostport != "" || srvName != ""
}

func (d *dnsSource) name(vs *setting.Values) string {
	if _, srvName := d.values(vs); srvName != "" {
		return "-dns-srv"
	}
	return "-dns"
}

func (d *dnsSource) String(vs *setting.Values) string {
	hostport, srvName := d.values(vs)
	if srvName != "" {
		return "DNS SRV " + srvName
	}
	return "DNS " + hostport
}

func (d *dnsSource) check(vs *setting.Values) error {
	hostport, srvName := d.values(vs)
	switch {
	case hostport != "" && srvName != "":
		return setting.Errorf(d.hostport.Setting, "-dns and -dns-srv: use one source of backends")
	case d.interval.Get(vs) <= 0:
		return setting.Errorf(d.interval.Setting, "-dns-interval must be positive")
	}
	if hostport != "" {
		if host, port, err := net.SplitHostPort(hostport); err != nil || host == "" || port == "" {
			return setting.Errorf(d.hostport.Setting, "-dns %q: want NAME:PORT", hostport)
		}
	}
	return nil
}

func (d *dnsSource) watch(ctx context.Context, vs *setting.Values, set func([]membership.Endpoint) error, opts WatchOptions) (func(), error) {
	o := membership.DNSOptions{Interval: d.interval.Get(vs), Logger: opts.Logger}
	var w *membership.DNSWatcher
	var err error
	if hostport, srvName := d.values(vs); srvName != "" {
		w, err = membership.WatchSRV(ctx, srvName, set, o)
	} else {
		w, err = membership.WatchDNS(ctx, hostport, set, o)
	}
	if err != nil {
		return nil, err
	}
	return func() { _ = w.Close() }, nil
}
