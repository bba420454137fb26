package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxKeyLen is the longest key an HTTP or gRPC edge sends to the store as it
// is; a longer one (its text is the client's choice) is replaced by
// "sha256:" and its hash in hex, so that a client cannot fill the store with
// large keys.
const MaxKeyLen = 256

// BoundKey returns k when it is at most MaxKeyLen bytes long, and otherwise
// "sha256:" followed by the hex SHA-256 of k.
func BoundKey(k string) string {
	if len(k) <= MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}
