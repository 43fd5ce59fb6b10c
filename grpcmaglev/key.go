package grpcmaglev

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
)

// keyContextKey is the context key WithKey stores an RPC's key under.
type keyContextKey struct{}

// WithKey returns a copy of ctx that makes key the hash key of RPCs made
// with it: the policy sends them to the endpoint that owns key in the
// Maglev table. A key set this way wins over the requestHashHeader. The
// empty string is a key like any other; an RPC with no key at all goes to a
// random READY endpoint. WithKey allocates one context; the key is not sent
// to the server.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyContextKey{}, key)
}

// rpcKey returns the key of the RPC whose context is ctx, and whether it has
// one: the key WithKey set, else the values of the metadata key header (if
// header is not ""), joined with ",". With WithKey or no header it does
// not allocate; reading the header costs the copy of its values that
// metadata.ValueFromOutgoingContext makes (one allocation for one value),
// plus the join when there are several.
func rpcKey(ctx context.Context, header string) (string, bool) {
	if k, ok := ctx.Value(keyContextKey{}).(string); ok {
		return k, true
	}
	if header == "" {
		return "", false
	}
	switch vals := metadata.ValueFromOutgoingContext(ctx, header); len(vals) {
	case 0:
		return "", false
	case 1:
		return vals[0], true
	default:
		return strings.Join(vals, ","), true
	}
}
