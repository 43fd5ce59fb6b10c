#!/usr/bin/env bash
# A one-machine lab for l4lb in network namespaces (docs/l4lb-quickstart.md,
# "Quick start"): a client, the load balancer and two backends on one segment,
# a bridge in a namespace of its own; nothing joined to the machine's
# own network.
#
#   cmd/l4lb/lab.sh up      build it, and start a server on each backend
#   cmd/l4lb/lab.sh down    remove everything it made
#
# As root, with ip (iproute2), ethtool and go. L4LAB=NAME names the lab
# (l4lab by default): its namespaces are NAME-client, NAME-lb, NAME-be1,
# NAME-be2 and NAME-sw, and several labs of different names may run at
# once. Addresses are from 198.18.0.0/15, the benchmarking range:
#
#   client  198.18.0.2    route to the VIP 198.19.0.1 via the load balancer
#   lb      198.18.0.3    eth0: run l4lb here
#   be1     198.18.0.11   the VIP on lo; HTTP on :80 answers "be1", echo on :7
#   be2     198.18.0.12   the same, "be2"
set -euo pipefail

lab=${L4LAB:-l4lab}
here=$(cd "$(dirname "$0")" && pwd)
state=/run/$lab # the backends' server and process ids
vip=198.19.0.1

die() {
	echo "lab.sh: $*" >&2
	exit 1
}

in_ns() {
	local ns=$1
	shift
	ip netns exec "$lab-$ns" "$@"
}

# host NS ADDR: the namespace NS, joined to the bridge by a veth pair
# (eth0 in NS with ADDR/24, p-NS in the bridge's namespace), lo and eth0 up.
host() {
	ip netns add "$lab-$1"
	ip -n "$lab-$1" link set lo up
	ip -n "$lab-sw" link add "p-$1" type veth peer name eth0 netns "$lab-$1"
	ip -n "$lab-sw" link set "p-$1" master br0 up
	ip -n "$lab-$1" addr add "$2/24" dev eth0
	ip -n "$lab-$1" link set eth0 up
}

up() {
	[ "$(id -u)" = 0 ] || die "run it as root: it makes network namespaces"
	for tool in ip ethtool go; do
		command -v "$tool" >/dev/null || die "$tool is missing (apt-get install iproute2 ethtool; Go from go.dev)"
	done
	[ ! -e "/run/netns/$lab-lb" ] || die "lab $lab is up already: $0 down removes it"
	trap 'down >/dev/null 2>&1 || true; die "could not build lab $lab"' ERR
	mkdir -p "$state"
	(cd "$here" && go build -o "$state/backend" ./lab/backend)

	ip netns add "$lab-sw"
	ip -n "$lab-sw" link set lo up
	ip -n "$lab-sw" link add br0 type bridge
	ip -n "$lab-sw" link set br0 up
	# With br_netfilter loaded, a bridge hands IPv4 to iptables; off here.
	for f in bridge-nf-call-iptables bridge-nf-call-ip6tables bridge-nf-call-arptables; do
		in_ns sw sh -c "echo 0 > /proc/sys/net/bridge/$f" 2>/dev/null || true
	done

	host client 198.18.0.2
	host lb 198.18.0.3
	host be1 198.18.0.11
	host be2 198.18.0.12

	# The client's route to the VIP is the load balancer (a router's, in
	# production). Its checksum offload is off: a frame the load balancer
	# sends on by XDP_TX has lost the note that its TCP checksum is still
	# to be filled in.
	ip -n "$lab-client" route add "$vip/32" via 198.18.0.3
	in_ns client ethtool -K eth0 tx off >/dev/null
	# XDP_TX on a veth delivers to its peer only if the peer runs an XDP
	# program too: one that passes every frame (xdpmaglev/bpf/pass.c).
	ip -n "$lab-sw" link set dev p-lb xdpdrv object "$here/../../xdpmaglev/pass_bpfel_test.o" section xdp

	for be in be1 be2; do
		ip -n "$lab-$be" addr add "$vip/32" dev lo
		# The VIP is not to be answered for, nor used as ARP's source.
		for dev in all eth0; do
			in_ns "$be" sh -c "echo 1 > /proc/sys/net/ipv4/conf/$dev/arp_ignore; echo 2 > /proc/sys/net/ipv4/conf/$dev/arp_announce"
		done
		in_ns "$be" "$state/backend" "$be" >/dev/null 2>&1 &
		echo $! >"$state/$be.pid"
	done
	trap - ERR

	cat <<EOF
lab $lab is up: client 198.18.0.2, load balancer 198.18.0.3 (eth0 of namespace $lab-lb),
backends 198.18.0.11 (be1) and 198.18.0.12 (be2) serving HTTP on the VIP $vip:80.
Run l4lb in it:
  ip netns exec $lab-lb go run ./cmd/l4lb run -iface eth0 -vip $vip:80 -backend 198.18.0.11 -backend 198.18.0.12
and, from another shell:
  ip netns exec $lab-client curl -s http://$vip/     # be1 or be2
  ip netns exec $lab-lb curl -s http://127.0.0.1:9180/debug/maglev/backends
$0 down removes the lab.
EOF
}

down() {
	for be in be1 be2; do
		if [ -f "$state/$be.pid" ]; then
			kill "$(cat "$state/$be.pid")" 2>/dev/null || true
		fi
	done
	local ns
	for ns in client lb be1 be2 sw; do
		if [ -e "/run/netns/$lab-$ns" ]; then
			# Whatever still runs in it (an l4lb left running) is ended.
			ip netns pids "$lab-$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
			ip netns del "$lab-$ns"
		fi
	done
	rm -rf "$state"
	echo "lab $lab is down"
}

case "${1:-}" in
up) up ;;
down) down ;;
*)
	echo "usage: $0 up|down   (L4LAB=NAME names the lab; docs/l4lb-quickstart.md)" >&2
	exit 2
	;;
esac
