// Package dnstest tests membership's DNS watchers (WatchDNS, WatchSRV),
// and through them the Watcher every membership source runs, against a
// real DNS server, github.com/miekg/dns serving on 127.0.0.1, reached
// through a net.Resolver, feeding real httpmaglev Transports. It is its
// own module so that membership's go.mod stays free of the DNS server and
// of httpmaglev; it has no API.
package dnstest
