module github.com/maglevlb/maglev/examples/l4lb

go 1.26.0

require (
	github.com/maglevlb/maglev/xdpmaglev v0.1.0
	github.com/vishvananda/netns v0.0.5
)

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/maglevlb/maglev v0.1.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	github.com/maglevlb/maglev => ../../
	github.com/maglevlb/maglev/xdpmaglev => ../../xdpmaglev
)
