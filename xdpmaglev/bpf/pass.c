//go:build ignore

// A program that passes every packet: what a veth's peer needs for the
// XDP_TX of a program on the veth to reach it (cmd/l4lb/lab.sh attaches
// it; ip link set dev PEER xdpdrv object pass_bpfel.o). It has no maps.

#include "bpf.h"

// xdp_pass passes every packet; it is also the floor the benchmarks
// measure the load balancer against.
SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char __license[] SEC("license") = "Dual MIT/GPL";
