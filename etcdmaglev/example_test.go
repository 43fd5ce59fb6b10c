package etcdmaglev_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/httpmaglev"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// A reverse proxy whose backends are the endpoints registered under
// services/web. Every proxy of a fleet that runs this computes the same
// table, so a user reaches the same backend through any of them.
func ExampleWatch() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	t, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-User"), HealthPath: "/healthz"})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = t.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := etcdmaglev.Watch(ctx, client, "services/web", t.SetEndpoints, etcdmaglev.WatchOptions{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err) // etcd could not be read at start
	}
	defer func() { _ = w.Close() }()
	proxy := &httputil.ReverseProxy{
		Transport:    t,
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "backends"}) },
		ErrorHandler: httpmaglev.ErrorHandler,
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", proxy))
}

// A backend that registers itself under services/web, and leaves
// gracefully on SIGTERM: deregistered first, so that proxies stop sending
// it new keys, then a drain, then its server's shutdown. Killed instead,
// it leaves every table when its lease's TTL runs out.
func ExampleRegister() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	srv := &http.Server{Addr: "10.0.0.7:8080", Handler: http.NotFoundHandler()}
	go func() {
		if err := srv.ListenAndServe(); err != http.ErrServerClosed {
			log.Fatal(err)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg, err := etcdmaglev.Register(ctx, client, "services/web", endpoints.Endpoint{Addr: srv.Addr}, etcdmaglev.RegisterOptions{TTL: 5 * time.Second, Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	done, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := reg.Deregister(done); err != nil {
		log.Print(err) // the lease still ends with its TTL
	}
	time.Sleep(2 * time.Second) // requests already routed here still arrive
	if err := srv.Shutdown(done); err != nil {
		log.Print(err)
	}
}
