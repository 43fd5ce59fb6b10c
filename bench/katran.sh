#!/usr/bin/env bash
# bench/katran.sh KATRAN_DIR [ROUNDS]
#
# Measures Katran's XDP program beside ours through one BPF_PROG_TEST_RUN
# harness: xdpmaglev's BenchmarkForward (ours) and BenchmarkKatran
# (Katran's balancer.bpf.c in the wrapper xdpmaglev/bpf/katran_bench.c),
# on the same packets and service. Needs root, clang and llc, and a
# checkout of github.com/facebookincubator/katran, given as KATRAN_DIR or
# in the environment as KATRAN_DIR. Nothing of Katran is copied: the
# wrapper includes Katran's program from the checkout, built here into a
# temporary directory removed at the end.
#
# Katran's program is built with the flags of Katran's open-source build
# (build_katran.sh runs build_bpf_modules_opensource.sh, which runs
# katran/lib/Makefile-bpf): clang for the host target to LLVM IR, then
# llc -march=bpf, with the Makefile's include directories (its include/
# is a copy of katran/lib/linux_includes, given here as it is) and
# defines. Two objects: Katran's defaults (XDPMAGLEV_KATRAN), and the
# same with MAX_CONN_RATE out of reach (XDPMAGLEV_KATRAN_UNGUARDED), for
# the new_flow cases: at its default of 125,000 new connections a second
# per CPU Katran skips the LRU write for most of the benchmark's new
# flows, where ours runs new_flow with its flood guard off. Extra defines
# for both, as build_bpf_modules_opensource.sh -d takes them, can be given
# in KATRAN_DEFINES.
#
# The xdpmaglev test binary is built once; ROUNDS rounds (default 6) then
# each run every case once (-test.count 1), so that ours and Katran's
# alternate on a noisy machine; benchstat compares them by the ns/packet
# medians. Environment: ROUNDS, BENCH (the -test.bench pattern),
# BENCHTIME (-test.benchtime, default 1s), OUT (a file to keep the raw
# results in; appended to), CLANG, LLC.
set -euo pipefail

usage() {
	echo "usage: $0 KATRAN_DIR [ROUNDS]   (or KATRAN_DIR=... $0)" >&2
	exit 2
}

katran=${1:-${KATRAN_DIR:-}}
[ -n "$katran" ] || usage
rounds=${2:-${ROUNDS:-6}}
bench=${BENCH:-'^Benchmark(Forward|Katran)$/^(floor|ipip|ipip6)$'}
benchtime=${BENCHTIME:-1s}
clang=${CLANG:-clang}
llc=${LLC:-llc}
read -r -a defines <<<"${KATRAN_DEFINES:-}"

if [ ! -f "$katran/katran/lib/bpf/balancer.bpf.c" ]; then
	echo "$katran: no katran/lib/bpf/balancer.bpf.c: not a Katran checkout" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "$0: run as root (the benchmarks load BPF programs and make network namespaces)" >&2
	exit 1
fi
katran=$(cd "$katran" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${OUT:-$tmp/results.txt}

# katran/lib/Makefile-bpf's rule for bpf/%.o, with its INCLUDEFLAGS,
# EXTRA_CFLAGS (here: the arguments), DEBUGBPF and the rest.
flags=(-DDEBUG -D__KERNEL__ -Wno-unused-value -Wno-pointer-sign
	-Wno-compare-distinct-pointer-types -O2 -emit-llvm -c -g)
build() {
	local obj=$1
	shift
	"$clang" -I"$katran/katran/lib/linux_includes" -I"$katran" \
		"${defines[@]}" "$@" "${flags[@]}" \
		"$root/xdpmaglev/bpf/katran_bench.c" -o - |
		"$llc" -march=bpf -filetype=obj -o "$obj"
}
echo "building Katran's program (bpf/katran_bench.c) from $katran" >&2
build "$tmp/katran.o"
build "$tmp/katran_unguarded.o" -DMAX_CONN_RATE=0xffffffffffffffffULL

echo "building the xdpmaglev test binary" >&2
(cd "$root/xdpmaglev" && go test -c -o "$tmp/xdpmaglev.test" .)

commit=$(git -C "$katran" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout)")
cmd=(-test.run '^$' -test.bench "$bench" -test.count 1 -test.benchtime "$benchtime")
for i in $(seq 1 "$rounds"); do
	echo "round $i of $rounds" >&2
	(cd "$root/xdpmaglev" &&
		XDPMAGLEV_KATRAN="$tmp/katran.o" XDPMAGLEV_KATRAN_UNGUARDED="$tmp/katran_unguarded.o" \
			"$tmp/xdpmaglev.test" "${cmd[@]}") >>"$out"
done

echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, kernel $(uname -r)"
echo "compilers: $("$clang" --version | head -1); $(go version)"
echo "katran: $commit"
echo "katran build: $clang -I KATRAN_DIR/katran/lib/linux_includes -I KATRAN_DIR ${defines[*]} ${flags[*]} xdpmaglev/bpf/katran_bench.c -o - | $llc -march=bpf -filetype=obj; unguarded: -DMAX_CONN_RATE=0xffffffffffffffffULL"
echo "command: XDPMAGLEV_KATRAN=katran.o XDPMAGLEV_KATRAN_UNGUARDED=katran_unguarded.o xdpmaglev.test $(printf '%q ' "${cmd[@]}")($rounds rounds)"
[ -z "${OUT:-}" ] || echo "raw results: $out"
echo
go run golang.org/x/perf/cmd/benchstat@latest -filter '.unit:ns/packet' -col .name "$out"
