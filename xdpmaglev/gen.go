package xdpmaglev

// The data plane, bpf/maglev.c, and the backends' decapsulator,
// bpf/decap.c, compiled for little- and big-endian BPF; and, for the
// tests only (_test.go), bpf/bench.c, the programs the benchmarks and the
// flow hash's test run against an LB's maps, and bpf/pass.c, the program
// that passes every packet, which a veth's peer needs (cmd/l4lb/lab.sh
// attaches pass_bpfel.o). The generated
// files are committed, so building this package needs no clang; CI
// regenerates them with Debian's clang and fails on a difference. The
// types and enums both sides use are generated (-type), never mirrored by
// hand.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -type slot -type backend -type down_key -type out -type flow -type flow4 -type svc_key -type svc_key4 -type service -type ct_entry -type stats -type cpu_counters -type flood -type quic_cfg -type quic_entry -type quic_cid -type quic_server_id -type forward -type counter -type consts -type layout_record maglev bpf/maglev.c -- -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -type addr -type src4 -type src6 -type decap_counter -type decap_cpu_counters decap bpf/decap.c -- -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -type quic_key_args quickey bpf/quic_key.c -- -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -output-suffix _test bench bpf/bench.c -- -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -output-suffix _test pass bpf/pass.c -- -Wall -Werror
