// Package xdptest is the kit that the tests of xdpmaglev and of l4lb
// share for running in network namespaces and sending frames there. It is
// for tests only: a function that can fail takes the test and fails it
// (In, which a test calls from goroutines too, returns its error), and
// the namespaces are named after the test process, so that test
// processes running at once do not collide.
//
// The pieces:
//
//   - Need skips a test that cannot run here (not root, ip or another
//     tool missing), and fails it instead under CI=true, where everything
//     a test needs is installed; Skip is the same for a reason of the
//     caller's.
//   - NewNS creates a network namespace, NAME-PID, removed at the end of
//     the test (on failure too), after deleting the namespaces of the same
//     name that killed test processes left; VethNS is one with a veth
//     pair, v0 and v1, inside; Veth joins two namespaces by a veth pair.
//     IP runs the ip command and Sysctl sets a namespace's sysctl.
//   - In runs a function in a namespace, on a thread of its own that goes
//     back to its namespace afterwards: sockets opened and programs loaded
//     there belong to the namespace, the test's goroutine stays out.
//     Interface reads an interface of a namespace.
//   - Ethernet, Packet, TCP and UDP build the frames the tests send, Checksum
//     computes the Internet checksum, and Send writes frames out of an
//     interface of a namespace through a packet socket.
//   - MountBPF and BPFFS mount a BPF filesystem of the test's own, for
//     pins.
//   - Exclusive and Shared take a lock shared by the test processes of
//     the machine, so that a test that loads the CPUs keeps apart from
//     those that measure time.
//
// Everything but the frame builders needs Linux; most of it needs root.
package xdptest
