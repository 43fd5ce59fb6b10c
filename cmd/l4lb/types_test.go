package main

import (
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
)

// The admin API's answers, as the tests decode them.
type (
	status         = admin.Status       // GET /debug/maglev
	backendsStatus = pool.Status        // GET /debug/maglev/backends
	backendStatus  = pool.BackendStatus // a backend of it
	decapStatus    = admin.DecapStatus  // GET /debug/maglev of l4lb decap
)
