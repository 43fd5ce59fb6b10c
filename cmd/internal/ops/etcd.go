package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
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
	urls   setting.ListOf[string]
	prefix setting.Of[string]
}

func newEtcdSource() *etcdSource {
	return &etcdSource{
		urls: setting.NewList(setting.Setting{Name: "etcd", Scope: setting.Source, Needs: "etcd-prefix", Reload: true,
			Doc: "etcd client `URLs`, comma-separated or the flag repeated: the backends are the endpoints registered under -etcd-prefix"}, urlList),
		prefix: setting.New(setting.Setting{Name: "etcd-prefix", Scope: setting.Source, Own: true, Reload: true,
			Doc: "the etcd key `prefix` (service name) the backends register under, as etcd's gRPC naming writes it"}, "", setting.String),
	}
}

// urlList parses -etcd's URLs: comma-separated, and the flag repeated.
func urlList(v string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out, nil
}

func (e *etcdSource) settings() []*setting.Setting {
	return []*setting.Setting{e.urls.Setting, e.prefix.Setting}
}

func (e *etcdSource) given(vs *setting.Values) bool { return len(e.urls.Get(vs)) > 0 }
func (e *etcdSource) name(*setting.Values) string   { return "-etcd" }

func (e *etcdSource) String(vs *setting.Values) string { return "etcd prefix " + e.prefix.Get(vs) }

func (e *etcdSource) check(vs *setting.Values) error {
	switch urls, prefix := e.urls.Get(vs), e.prefix.Get(vs); {
	case len(urls) > 0 && strings.Trim(prefix, "/") == "":
		return setting.Errorf(e.urls.Setting, "-etcd needs -etcd-prefix")
	case len(urls) == 0 && prefix != "":
		return setting.Errorf(e.prefix.Setting, "-etcd-prefix needs -etcd")
	}
	return nil
}

func (e *etcdSource) watch(ctx context.Context, vs *setting.Values, set func([]membership.Endpoint) error, opts WatchOptions) (func(), error) {
	c, err := EtcdClient(e.urls.Get(vs))
	if err != nil {
		return nil, err
	}
	w, err := etcdmaglev.Watch(ctx, c, e.prefix.Get(vs), set, etcdmaglev.WatchOptions{Logger: opts.Logger})
	if err != nil {
		_ = c.Close() // the Watch error is the one to report
		return nil, err
	}
	return func() { _ = w.Close(); _ = c.Close() }, nil // neither fails
}
