package grpcmaglev

import (
	"google.golang.org/grpc/balancer"
	estats "google.golang.org/grpc/experimental/stats"
)

// The names of the policy's metrics (see Metrics in the package doc), for
// the Metrics of grpc's OpenTelemetry plugin, which records them only when
// they are among its metrics:
//
//	opentelemetry.DefaultMetrics().Add(grpcmaglev.MetricPicks, grpcmaglev.MetricSpills,
//		grpcmaglev.MetricRebuilds, grpcmaglev.MetricSlotsMoved)
const (
	MetricPicks      = "grpc.lb.maglev.picks"
	MetricSpills     = "grpc.lb.maglev.spills"
	MetricRebuilds   = "grpc.lb.maglev.rebuilds"
	MetricSlotsMoved = "grpc.lb.maglev.slots_moved"
)

// The metrics' labels, after grpc's ("grpc.target" is the channel's
// canonical target, as on grpc's own metrics).
const (
	labelTarget  = "grpc.target"
	labelOutcome = "grpc.lb.maglev.outcome"
)

var (
	picksMetric = estats.RegisterInt64Count(estats.MetricDescriptor{
		Name:        MetricPicks,
		Description: "Picks made by the maglev load-balancing policy, by outcome: ok (a keyed RPC given to a connection), no_key (an RPC with no key given to a random READY endpoint), queued (the chosen endpoint is connecting: the RPC is picked again when the next picker is published), failed (no usable endpoint).",
		Unit:        "{pick}",
		Labels:      []string{labelTarget, labelOutcome},
		Default:     false,
	})
	spillsMetric = estats.RegisterInt64Count(estats.MetricDescriptor{
		Name:        MetricSpills,
		Description: "Keyed picks of the maglev load-balancing policy with a balanceFactor that went to a later candidate because the key's owner was at capacity (each also a pick with outcome ok).",
		Unit:        "{pick}",
		Labels:      []string{labelTarget},
		Default:     false,
	})
	rebuildsMetric = estats.RegisterInt64Count(estats.MetricDescriptor{
		Name:        MetricRebuilds,
		Description: "Maglev tables built by the maglev load-balancing policy to replace the channel's last one (the first table is not a rebuild).",
		Unit:        "{rebuild}",
		Labels:      []string{labelTarget},
		Default:     false,
	})
	slotsMovedMetric = estats.RegisterInt64Count(estats.MetricDescriptor{
		Name:        MetricSlotsMoved,
		Description: "Slots of the maglev load-balancing policy's tables whose owner a rebuild changed (the Diff of the tables before and after).",
		Unit:        "{slot}",
		Labels:      []string{labelTarget},
		Default:     false,
	})
)

// An outcome is the value of a pick's grpc.lb.maglev.outcome label.
type outcome uint8

const (
	outcomeOK     outcome = iota // a keyed RPC given to a connection
	outcomeNoKey                 // an RPC with no key given to a connection
	outcomeQueued                // balancer.ErrNoSubConnAvailable
	outcomeFailed                // any other error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "no_key", "queued", "failed"}

// channelMetrics records the policy's metrics for one channel through the
// MetricsRecorder gRPC built the policy with, which forwards them to the
// channel's stats handlers that record them (grpc's OpenTelemetry plugin,
// when they are among its metrics) and never is nil. The label values are
// made once per channel, and a record passes them as a slice it holds
// (labels...): literal arguments to the recorder, an interface, would be
// allocated on each call. A channelMetrics is immutable, so safe for
// concurrent use; a nil one records nothing (the package's picker tests
// build balancers with no channel).
type channelMetrics struct {
	recorder estats.MetricsRecorder
	target   []string              // {target}
	picks    [numOutcomes][]string // {target, outcome name}, by outcome
}

// newChannelMetrics returns the metrics of the channel whose recorder and
// canonical target are given.
func newChannelMetrics(r estats.MetricsRecorder, target string) *channelMetrics {
	m := &channelMetrics{recorder: r, target: []string{target}}
	for o, name := range outcomeNames {
		m.picks[o] = []string{target, name}
	}
	return m
}

// pick counts a pick that returned err: with no error, as ok (ok is
// outcomeOK or outcomeNoKey); with balancer.ErrNoSubConnAvailable, which
// gRPC compares with ==, as queued; else as failed. It does not allocate.
func (m *channelMetrics) pick(ok outcome, err error) {
	if m == nil {
		return
	}
	o := ok
	switch err {
	case nil:
	case balancer.ErrNoSubConnAvailable:
		o = outcomeQueued
	default:
		o = outcomeFailed
	}
	m.recorder.RecordInt64Count(picksMetric, 1, m.picks[o]...)
}

// spill counts a keyed pick that went to a later candidate than the key's
// owner. It does not allocate.
func (m *channelMetrics) spill() {
	if m == nil {
		return
	}
	m.recorder.RecordInt64Count(spillsMetric, 1, m.target...)
}

// rebuild counts a rebuild that moved the given number of slots.
func (m *channelMetrics) rebuild(moved int) {
	if m == nil {
		return
	}
	m.recorder.RecordInt64Count(rebuildsMetric, 1, m.target...)
	m.recorder.RecordInt64Count(slotsMovedMetric, int64(moved), m.target...)
}
