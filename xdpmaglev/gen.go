package xdpmaglev

// The data plane, bpf/maglev.c, compiled for little- and big-endian BPF.
// The generated files are committed, so building this package needs no
// clang; CI regenerates them with Debian's clang and fails on a
// difference.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -type slot -type backend -type flow -type flow4 -type svc_key -type svc_key4 -type service -type ct_entry -type stats maglev bpf/maglev.c -- -Wall -Werror
