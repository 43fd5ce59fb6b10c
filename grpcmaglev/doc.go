// Package grpcmaglev is Maglev consistent hashing as a gRPC load-balancing
// policy. A Go service gets it by adding one import:
//
//	import _ "github.com/maglevlb/maglev/grpcmaglev"
//
// and choosing the policy by name ("maglev") in its service config:
//
//	{"loadBalancingConfig": [{"maglev": {"requestHashHeader": "x-user"}}]}
//
// Each RPC's key is the value of that metadata header (several values are
// joined with ","), or the key set with [WithKey], which wins. The policy
// sends the RPC to the key's owner in the Maglev table of
// github.com/maglevlb/maglev over the channel's endpoints, whatever resolver
// produced them (DNS, xDS, a registry), so every client of a fleet sends a
// key to the same server with no coordination. An RPC with no key goes to a
// random READY endpoint.
//
// # Config
//
// Every field is optional; absent or null fields take their defaults, and
// unknown fields are rejected.
//
//   - requestHashHeader: the metadata key whose values are the RPC's key.
//     It is lower-cased and must be a valid gRPC metadata key that does not
//     end in "-bin". Default: none (only WithKey sets keys).
//   - tableSize: the table's size M, a prime no larger than maglev.MaxSize.
//     Default: maglev.DefaultSize (65,537).
//   - seed: the XXH3 seed, a JSON integer from 0 to 2^64-1 (write large
//     seeds exactly; a JSON encoder that goes through float64 rounds them).
//     Default 0, the library's default hasher.
//   - balanceFactor: bounded loads (see below), a JSON number that is 0
//     (off) or finite and at least 1; Envoy's users set 1.25. Default 0.
//   - envoyCompatible: a JSON bool. When true, the table is Envoy's Maglev
//     table for the same endpoints, weights and tableSize
//     (envoymaglev.New), and keys are hashed with XXH64 as Envoy hashes a
//     header's value, so that this client and an Envoy with a header hash
//     policy on the same header pick the same server for every key (with
//     balanceFactor, only while no key spills: Envoy's hash_balance_factor
//     is not modeled). seed must then be 0 or absent. Default false.
//
// Field names are matched exactly, case included. grpc parses the config
// with the service config that holds it: a bad field makes the whole
// service config invalid, with an error that names it (see
// [ErrInvalidConfig]); grpc.NewClient with such a config as its default
// service config fails with that error, and one from the resolver is
// ignored while the channel has a good one.
//
// # The table
//
// An endpoint's name in the table is the hash key the resolver set with
// google.golang.org/grpc/resolver/ringhash (xDS fills it from EDS
// metadata), else its first address; its weight is the one set with
// google.golang.org/grpc/experimental/balancer/weight, 1 if none is set
// (as gRPC's own policies read it). The table is
// maglev.NewWeighted(names, tableSize, maglev.XXH3Seed(seed)) over every
// endpoint that is not in TRANSIENT_FAILURE (one that was counts as failed
// until it is READY again), so with every server up a key goes exactly
// where the library's Lookup says, from the first RPC on.
//
// A weight set to 0 drains the endpoint, as in every package of the
// project: its connection stays and the RPCs on it finish, but no new RPC
// goes to it, keyed or not, and its state is not the channel's (with every
// endpoint drained the channel is in TRANSIENT_FAILURE, and RPCs fail with
// ErrNoUsableEndpoint). gRPC's xDS never sets 0, and gRPC's other
// policies read 0 as 1: a resolver that drains by weight drains for this
// policy only.
//
// Each endpoint has a pick_first child (through grpc's endpointsharding),
// with pick_first's health listener on: with a healthCheckConfig in the
// service config, an endpoint that reports NOT_SERVING enters
// TRANSIENT_FAILURE like one that cannot be reached. The package imports
// google.golang.org/grpc/health, which client-side health checks need.
//
// # Bounded loads
//
// With a balanceFactor F, a keyed RPC goes to the first of its key's
// candidates (maglev.Table.Candidates order) whose in-flight count is below
// its capacity ceil(F × L × w_i/Σw), with L the keyed RPCs in flight on the
// channel, this one included: bounded.Picker, one set of counts per
// channel, which each picker binds to its own table with Picker.With, so
// that endpoints that stay across a rebuild keep their counts. An RPC holds
// its place from the pick until gRPC calls the pick's Done. A chosen
// candidate that is connecting or idle makes the pick queue, as the key's
// owner does without the factor, and holds nothing while it waits. RPCs
// with no key go to a random READY endpoint and are not counted. With F
// absent or 0 nothing is counted, and every key goes to its owner.
//
// # Failures
//
//   - The owner of a key is connecting, or reconnecting after a drain
//     (GOAWAY): the RPC waits for it, even a fail-fast one, instead of going
//     elsewhere.
//   - An endpoint enters TRANSIENT_FAILURE (its server is gone, or NOT_SERVING):
//     it is taken out of service with maglev.Table.Without, off the pick
//     path, and a new picker published. Its keys move, and no other: a
//     failure is not a membership change, so the table over every endpoint
//     the resolver gave stays, and the failed ones are out of it. Every
//     channel that sees the same endpoints failed has the same table. When
//     it is READY again, it takes back exactly the keys it had. (With
//     envoyCompatible, the table of the usable endpoints is built again
//     instead, as Envoy does, so that it stays Envoy's; its keys move with
//     Maglev's usual small excess.) Each change is logged (grpclog
//     component "maglev", at info) with the slots moved.
//   - A resolver update that adds or removes an endpoint builds the table of
//     the new set (maglev.NewWeighted), as the spec says.
//   - A server that crashes fails the RPCs in flight on it with Unavailable,
//     unless the service config has a retry policy; RPCs made after the
//     client notices go to the new owners. A server that drains
//     (GracefulStop) fails none: its in-flight RPCs finish, and new ones
//     wait for the client to notice and then go to the new owners.
//   - No endpoint usable: fail-fast RPCs fail with Unavailable and a message
//     carrying the last connection error ([ErrNoUsableEndpoint]);
//     WaitForReady RPCs wait.
//
// # Metrics
//
// The policy registers four counters with grpc's metrics registry
// (google.golang.org/grpc/experimental/stats) and records them through the
// MetricsRecorder gRPC builds it with, as grpc's weighted_round_robin
// does. Like grpc's own load-balancing metrics they are off by default: a
// client gets them from grpc's OpenTelemetry plugin
// (google.golang.org/grpc/stats/opentelemetry) by adding their names to
// its metrics:
//
//	opentelemetry.DialOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{
//		MeterProvider: provider,
//		Metrics: opentelemetry.DefaultMetrics().Add(grpcmaglev.MetricPicks, grpcmaglev.MetricSpills,
//			grpcmaglev.MetricRebuilds, grpcmaglev.MetricSlotsMoved),
//	}})
//
// Each is labeled with the channel's canonical target ("grpc.target"):
//
//   - grpc.lb.maglev.picks ({pick}), also labeled with the pick's outcome
//     ("grpc.lb.maglev.outcome"): "ok", a keyed RPC given to a connection
//     (its key's owner's, or with balanceFactor a later candidate's);
//     "no_key", an RPC with no key given to a random READY endpoint's;
//     "queued", the chosen endpoint is connecting, or, for an RPC with no
//     key, none is READY while some connect; "failed", no usable endpoint.
//     gRPC picks a queued RPC again when the next picker is published, and
//     a failed WaitForReady one too, so these count picks, not RPCs.
//   - grpc.lb.maglev.spills ({pick}): keyed picks with balanceFactor that
//     went to a later candidate because the key's owner was at capacity;
//     each is also an "ok" pick.
//   - grpc.lb.maglev.rebuilds ({rebuild}): tables built to replace the
//     channel's last one; its first table is not a rebuild.
//   - grpc.lb.maglev.slots_moved ({slot}): the slots those rebuilds gave
//     another owner, maglev.Table.Diff of the tables before and after
//     each, the number the log line gives.
//
// A channel that does not turn them on records into a recorder that drops
// them: one call a pick, and no allocation.
//
// # Costs
//
// A pick hashes the key once and indexes an immutable table: no build, no
// lock shared with rebuilds, no allocation for a key set by WithKey (a
// key read from the header costs the copy of its values grpc's metadata
// package makes). With a balanceFactor, a keyed pick also takes and
// releases a lease (a few atomic operations) and allocates its Done
// callback, 48 bytes. A failure or a recovery costs a maglev.Table.Without
// (a fraction of a build), a Diff for the log line and a new picker: at
// 1,000 endpoints and the default size, a median of 2.3 ms against 4.6 ms
// for the full rebuild it replaced (BenchmarkRebuild, six interleaved runs
// each on a shared, loaded 2-vCPU machine). A resolver update costs
// maglev.NewWeighted's build.
//
// grpc marks endpointsharding, pick_first's health listener and the weight
// and hash-key attributes experimental. This module's go.mod requires the
// grpc version it is tested with, v1.85.0; a require is a minimum, so a
// build in which another module requires a later grpc uses that one, which
// the policy's tests have not run against.
package grpcmaglev
