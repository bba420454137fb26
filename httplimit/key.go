package httplimit

import "github.com/funnelrl/funnel"

// BoundKey is funnel.BoundKey, the one bound on a key of every edge (keys
// longer than funnel.MaxKeyLen are stored under their hash).
func BoundKey(k string) string { return funnel.BoundKey(k) }
