package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/quicmaglev/quicecho"
)

// TestRun serves with an encrypted configuration from a key file and
// answers a client; bad flags are refused.
func TestRun(t *testing.T) {
	key := filepath.Join(t.TempDir(), "quic.key")
	if err := os.WriteFile(key, []byte("8f95f09245765f80256934e50c66207f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var log bytes.Buffer
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-name", "be1", "-config-id", "2", "-server-id", "0a0b0c", "-key-file", key}, &log, ready)
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	c, err := quicecho.Dial(cctx, pc, addr)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := c.Echo(cctx, "hi"); err != nil || name != "be1" {
		t.Fatalf("echo: %q, %v", name, err)
	}
	_ = c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "server ID 0a0b0c, configuration 2 (four-pass)") {
		t.Fatalf("log %q", log.String())
	}

	for _, args := range [][]string{
		{"-listen", "127.0.0.1:0"},
		{"-server-id", "0a0"},
		{"-server-id", "0a", "-nonce-length", "3"},
		{"-server-id", "0a", "-key-file", filepath.Join(t.TempDir(), "none")},
		{"-server-id", "0a", "-config-id", "7"},
	} {
		if err := run(context.Background(), args, &log, nil); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
