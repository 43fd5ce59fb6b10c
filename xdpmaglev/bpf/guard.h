// The flood guard: a bound on how fast new flows can turn connection
// tracking over, whatever their rate. Every conntrack entry written costs
// credit, which accrues with time; a new flow that finds no credit is
// routed by the table alone, with no entry, so a flood of spoofed tuples
// cannot evict the entries of idle established flows faster than
// Options.FloodRate entries a second (docs/xdp-design.md, "The flood guard").

#pragma once

#include "bpf.h"
#include "maps.h"

#define FLOOD_BURST 10000000000ULL // ns of credit a CPU can hold: 10 s of its share of FloodRate

// flood_guard takes the credit of one conntrack entry on this CPU, and
// says whether there was not enough: then the entry is not written. A
// CPU's credit accrues at one ns a ns, up to FLOOD_BURST, and an entry
// costs flood_cost ns (possible CPUs × 10^9 / FloodRate), so in any t
// seconds the CPUs write at most FloodRate × (t + 10) entries together: an
// entry idle for less than ConntrackSize / FloodRate − 10 seconds outlives
// any flood. The time from a refused flow to the next one refused is
// summed in ns (Stats.FloodSeconds).
static __always_inline int flood_guard(void)
{
	if (flood_cost == 0)
		return 0;
	__u32 k = 0;
	struct flood *s = bpf_map_lookup_elem(&flood_state, &k);
	if (!s)
		return 0;
	__u64 now = bpf_ktime_get_coarse_ns();
	__u64 credit = s->credit + (now - s->last);
	if (credit > FLOOD_BURST)
		credit = FLOOD_BURST;
	int refuse = credit < flood_cost;
	if (refuse) {
		if (s->refused)
			s->ns += now - s->last;
	} else {
		credit -= flood_cost;
	}
	s->credit = credit;
	s->last = now;
	s->refused = refuse;
	return refuse;
}
