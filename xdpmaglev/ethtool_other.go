//go:build !linux

package xdpmaglev

type driver struct{}

func newDriver(string) (*driver, error) { return nil, ErrInterface }

func (*driver) close() {}

func (*driver) stats() (map[string]uint64, error) { return nil, nil }
