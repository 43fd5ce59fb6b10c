module github.com/maglevlb/maglev

go 1.25.0

require (
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da
	github.com/zeebo/xxh3 v1.1.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
