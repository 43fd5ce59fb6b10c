module github.com/maglevlb/maglev/envoymaglev

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/maglevlb/maglev v0.1.0
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/maglevlb/maglev/membership v0.1.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
)

require (
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/maglevlb/maglev/httpmaglev v0.1.0
	github.com/zeebo/xxh3 v1.1.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/maglevlb/maglev => ../

replace github.com/maglevlb/maglev/httpmaglev => ../httpmaglev

replace github.com/maglevlb/maglev/membership => ../membership
