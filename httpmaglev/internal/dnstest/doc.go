// Package dnstest tests httpmaglev's DNS membership (WatchDNS, WatchSRV)
// against a real DNS server, github.com/miekg/dns serving on 127.0.0.1,
// reached through a net.Resolver. It is its own module so that the
// library's go.mod stays free of the DNS server; it has no API.
package dnstest
