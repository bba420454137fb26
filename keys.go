package funnel

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxKeyLen is the longest key that every edge (RESP, HTTP, the
// middleware, Envoy's rate-limit service) sends to the store as it is, in
// bytes. A longer key, whose text is a client's choice, is stored under
// its hash (see BoundKey), so that the same long key is the same store key
// on every edge and no client fills the store with large keys.
const MaxKeyLen = 1024

// hashedKeyPrefix starts the store key of a key longer than MaxKeyLen.
const hashedKeyPrefix = "sha256:"

// BoundKey returns key when it is at most MaxKeyLen bytes long, and
// otherwise "sha256:" followed by the hex SHA-256 of the whole key (71
// bytes): collision-resistant, so that two long keys share a bucket only
// if they are the same key. It allocates only for a long key.
func BoundKey(key string) string {
	if len(key) <= MaxKeyLen {
		return key // inlined: a short key costs a comparison
	}
	return hashKey(key)
}

// hashKey returns the store key of a key longer than MaxKeyLen.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hashedKeyPrefix + hex.EncodeToString(sum[:])
}

// StoreKey returns the store key of a client's key under prefix: prefix
// followed by BoundKey(key). The prefix is the program's (the middleware's
// Prefix, the rate-limit service's KeyPrefix), never hashed, so that the
// keys of one prefix stay apart from every other's in a shared store; the
// Redis store's own Options.Prefix comes before it. Every edge maps a key
// through this one function.
func StoreKey(prefix, key string) string {
	if prefix == "" {
		return BoundKey(key)
	}
	return prefix + BoundKey(key)
}
