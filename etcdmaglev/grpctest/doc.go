// Package grpctest holds the test of etcdmaglev with grpcmaglev: gRPC
// clients on etcd's own resolver and a Transport fed by an etcdmaglev
// Watcher on the same prefix route every key alike. It is a module of its
// own so that etcdmaglev's users never get grpcmaglev in their build list.
// It has no API.
package grpctest
