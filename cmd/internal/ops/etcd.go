package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/membership"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// EtcdClient returns a client of the etcd at urls, set up for a watcher
// that must follow etcd through restarts: quiet (the watcher logs what
// matters; the client's own warnings would repeat every retry while etcd
// is down), and reconnecting within a second of etcd's return (grpc's
// default backoff grows to two minutes).
func EtcdClient(urls []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   urls,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return c, nil
}

// etcdSource is -etcd URLS with -etcd-prefix PREFIX: the endpoints
// registered under the prefix in etcd's gRPC naming format, as
// etcdmaglev.Register writes them.
type etcdSource struct {
	urls   urlList
	prefix string
}

// urlList collects -etcd's URLs: comma-separated, and the flag repeated.
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, ",") }

func (l *urlList) Set(v string) error {
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*l = append(*l, u)
		}
	}
	return nil
}

func (e *etcdSource) register(fs *flag.FlagSet) {
	fs.Var(&e.urls, "etcd", "etcd client `URLs`, comma-separated or the flag repeated: the backends are the endpoints registered under -etcd-prefix")
	fs.StringVar(&e.prefix, "etcd-prefix", "", "the etcd key `prefix` (service name) the backends register under, as etcd's gRPC naming writes it")
}

func (e *etcdSource) given() bool  { return len(e.urls) > 0 }
func (e *etcdSource) name() string { return "-etcd" }

func (e *etcdSource) String() string { return "etcd prefix " + e.prefix }

func (e *etcdSource) check() error {
	switch {
	case len(e.urls) > 0 && strings.Trim(e.prefix, "/") == "":
		return errors.New("-etcd needs -etcd-prefix")
	case len(e.urls) == 0 && e.prefix != "":
		return errors.New("-etcd-prefix needs -etcd")
	}
	return nil
}

func (e *etcdSource) watch(ctx context.Context, set func([]membership.Endpoint) error, opts WatchOptions) (func(), error) {
	c, err := EtcdClient(e.urls)
	if err != nil {
		return nil, err
	}
	w, err := etcdmaglev.Watch(ctx, c, e.prefix, set, etcdmaglev.WatchOptions{Logger: opts.Logger})
	if err != nil {
		_ = c.Close() // the Watch error is the one to report
		return nil, err
	}
	return func() { _ = w.Close(); _ = c.Close() }, nil // neither fails
}
