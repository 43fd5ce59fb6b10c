module github.com/maglevlb/maglev/envoymaglev

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/maglevlb/maglev v0.1.0
)

require (
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/maglevlb/maglev/httpmaglev v0.1.0
	github.com/zeebo/xxh3 v1.1.0 // indirect
	golang.org/x/sys v0.41.0 // indirect
)

replace github.com/maglevlb/maglev => ../

replace github.com/maglevlb/maglev/httpmaglev => ../httpmaglev
