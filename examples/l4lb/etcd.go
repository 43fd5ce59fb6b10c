package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/membership"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// startTimeout bounds the first read of the membership from etcd: a load
// balancer that cannot read it at start fails, rather than route with no
// backends.
const startTimeout = 10 * time.Second

// watchEtcd feeds the pool the endpoints registered under prefix, once
// the first list has been read; stop ends it. While etcd cannot be
// reached the last list stays (the membership.Watcher's promise).
func watchEtcd(ctx context.Context, urls []string, prefix string, p *pool, logger *slog.Logger) (stop func(), err error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   urls,
		DialTimeout: 5 * time.Second,
		// The Watcher logs what matters; the client's own warnings would
		// repeat every retry while etcd is down.
		Logger: zap.NewNop(),
		// Reconnect within a second of etcd's return (grpc's default
		// backoff grows to two minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	set := func(eps []membership.Endpoint) error { return p.setMembers(members(eps, logger)) }
	w, err := etcdmaglev.Watch(ctx, c, prefix, set, etcdmaglev.WatchOptions{Logger: logger})
	if err != nil {
		_ = c.Close() // the Watch error is the one to report
		return nil, err
	}
	return func() { _ = w.Close(); _ = c.Close() }, nil // neither fails
}
