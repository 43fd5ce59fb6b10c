module github.com/maglevlb/maglev/httpmaglev

go 1.25.0

require github.com/maglevlb/maglev v0.1.0

require (
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	golang.org/x/sys v0.41.0 // indirect
)

replace github.com/maglevlb/maglev => ../
