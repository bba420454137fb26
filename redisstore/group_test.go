package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/redisstore"
)

// Group is the hash slot of the stored key (prefix included) on Redis
// Cluster, 0 on a single Redis and -1 over a Ring. Open and New do not
// dial, so the addresses need not answer.
func TestGroup(t *testing.T) {
	t.Parallel()
	cluster, err := redisstore.Open("redis-cluster://127.0.0.1:1,127.0.0.1:2", redisstore.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	// Slots as Redis's CLUSTER KEYSLOT gives them.
	for key, want := range map[string]int{
		"{123456789}x":         12739,
		"{foo}":                12182,
		"{user1000}.following": cluster.Group("{user1000}.followers"),
	} {
		if got := cluster.Group(key); got != want {
			t.Errorf("Group(%q) = %d, want %d", key, got, want)
		}
	}
	if cluster.Group("a") == cluster.Group("b") {
		t.Errorf("p:a and p:b in one slot (%d)", cluster.Group("a"))
	}
	single, err := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	for _, key := range []string{"a", "{t}b"} {
		if g := single.Group(key); g != 0 {
			t.Errorf("single: Group(%q) = %d, want 0", key, g)
		}
		if g := redisstore.New(ring, redisstore.Options{}).Group(key); g != -1 {
			t.Errorf("ring: Group(%q) = %d, want -1", key, g)
		}
	}
}
