module github.com/maglevlb/maglev/xdpmaglev

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/maglevlb/maglev v0.1.0
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.49.0
)

require (
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
)

replace github.com/maglevlb/maglev => ../
