//go:build !linux

package xdpmaglev

import (
	"context"
	"net"
	"net/netip"
)

type neighbours struct{}

func newNeighbours(int) (*neighbours, error) { return nil, ErrInterface }

func (*neighbours) close() {}

func (*neighbours) resolve(context.Context, netip.Addr) (net.HardwareAddr, error) {
	return nil, ErrNoNeighbor
}

func (*neighbours) prime(context.Context, ...netip.Addr) {}

func (*neighbours) ask(...netip.Addr) []netip.Addr { return nil }

func (*neighbours) addr(bool) (netip.Addr, error) { return netip.Addr{}, ErrInterface }

func (*neighbours) all() (map[netip.Addr]net.HardwareAddr, error) { return nil, ErrNoNeighbor }

func (*neighbours) keep(...netip.Addr) {}
