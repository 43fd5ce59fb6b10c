module github.com/maglevlb/maglev/quicmaglev

go 1.26.0

require (
	github.com/maglevlb/maglev v0.1.0
	github.com/quic-go/quic-go v0.65.0
)

require (
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/maglevlb/maglev => ../
