package pool

import "sync"

// ApplyMu is p's applyMu, for the external tests.
func ApplyMu(p *Pool) *sync.Mutex { return &p.applyMu }
