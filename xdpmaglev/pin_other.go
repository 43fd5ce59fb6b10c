//go:build !linux

package xdpmaglev

import "os"

func onBPFFS(string) error { return ErrOptions }

func lockDir(string) (*os.File, error) { return nil, ErrOptions }

func netnsID() (uint64, error) { return 0, ErrOptions }

func xdpMode(int) (AttachMode, error) { return AttachNone, ErrInterface }
