package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/maglevlb/maglev/membership"
)

// dnsSource is -dns NAME:PORT (the A/AAAA records of NAME) or -dns-srv
// NAME (its lowest-priority SRV records), looked up every -dns-interval;
// a and srv say which of the two the program takes.
type dnsSource struct {
	a, srv            bool
	hostport, srvName string
	interval          time.Duration
}

func (d *dnsSource) register(fs *flag.FlagSet) {
	var which []string
	if d.a {
		fs.StringVar(&d.hostport, "dns", "", "backends are the A/AAAA records of `NAME:PORT`, looked up every -dns-interval")
		which = append(which, "-dns")
	}
	if d.srv {
		fs.StringVar(&d.srvName, "dns-srv", "", "backends are the lowest-priority SRV records of `NAME`, looked up every -dns-interval")
		which = append(which, "-dns-srv")
	}
	fs.DurationVar(&d.interval, "dns-interval", 5*time.Second, "time between DNS lookups of "+strings.Join(which, " or "))
}

func (d *dnsSource) given() bool { return d.hostport != "" || d.srvName != "" }

func (d *dnsSource) name() string {
	if d.srvName != "" {
		return "-dns-srv"
	}
	return "-dns"
}

func (d *dnsSource) String() string {
	if d.srvName != "" {
		return "DNS SRV " + d.srvName
	}
	return "DNS " + d.hostport
}

func (d *dnsSource) check() error {
	switch {
	case d.hostport != "" && d.srvName != "":
		return errors.New("-dns and -dns-srv: use one source of backends")
	case d.interval <= 0:
		return errors.New("-dns-interval must be positive")
	}
	if d.hostport != "" {
		if host, port, err := net.SplitHostPort(d.hostport); err != nil || host == "" || port == "" {
			return fmt.Errorf("-dns %q: want NAME:PORT", d.hostport)
		}
	}
	return nil
}

func (d *dnsSource) watch(ctx context.Context, set func([]membership.Endpoint) error, opts WatchOptions) (func(), error) {
	o := membership.DNSOptions{Interval: d.interval, Logger: opts.Logger}
	var w *membership.DNSWatcher
	var err error
	if d.srvName != "" {
		w, err = membership.WatchSRV(ctx, d.srvName, set, o)
	} else {
		w, err = membership.WatchDNS(ctx, d.hostport, set, o)
	}
	if err != nil {
		return nil, err
	}
	return func() { _ = w.Close() }, nil
}
