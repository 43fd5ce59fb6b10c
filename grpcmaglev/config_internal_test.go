package grpcmaglev

import "testing"

// TestParseConfigValues: the parsed config holds the values given, integers
// exactly as written (a seed above 2^53, where float64 skips integers),
// and the defaults for absent and null fields.
func TestParseConfigValues(t *testing.T) {
	for _, c := range []struct {
		js   string
		want lbConfig
	}{
		{`{}`, lbConfig{size: 65537}},
		{`null`, lbConfig{size: 65537}},
		{`{"requestHashHeader": null, "tableSize": null, "seed": null, "balanceFactor": null}`, lbConfig{size: 65537}},
		{`{"requestHashHeader": "X-User", "tableSize": 101, "seed": 9007199254740993, "balanceFactor": 1.25}`,
			lbConfig{header: "x-user", size: 101, seed: 1<<53 + 1, factor: 1.25}},
		{`{"seed": 18446744073709551615, "tableSize": 16777259}`, lbConfig{size: 16777259, seed: 1<<64 - 1}},
		{` {"seed": 7} `, lbConfig{size: 65537, seed: 7}},
		{`{"envoyCompatible": true, "tableSize": 7}`, lbConfig{size: 7, envoy: true}},
		{`{"envoyCompatible": false, "seed": 3}`, lbConfig{size: 65537, seed: 3}},
		{`{"envoyCompatible": true, "seed": 0}`, lbConfig{size: 65537, envoy: true}},
		{`{"envoyCompatible": null}`, lbConfig{size: 65537}},
	} {
		cfg, err := parseConfig([]byte(c.js))
		if err != nil {
			t.Errorf("parseConfig(%s): %v", c.js, err)
			continue
		}
		if *cfg != c.want {
			t.Errorf("parseConfig(%s) = %+v; want %+v", c.js, *cfg, c.want)
		}
	}
}
