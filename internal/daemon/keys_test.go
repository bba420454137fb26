package daemon_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
)

// TestLongKeyOneBucket: the same key longer than funnel.MaxKeyLen, decided
// over HTTP and then over RESP, is one bucket: both edges store it under
// funnel.BoundKey's hash (HTTP refused it, and RESP stored it as it was,
// before). RESP sees the state under the hash too.
func TestLongKeyOneBucket(t *testing.T) {
	t.Parallel()
	d, _, _ := start(t, testConfig())
	rdb := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	long := strings.Repeat("u", 4000)
	res, err := http.Post("http://"+d.HTTPAddr().String()+"/v1/throttle", "application/json",
		strings.NewReader(`{"key":"`+long+`","limit":{"count":1,"period":"60s","burst":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"remaining":1`) {
		t.Fatalf("POST /v1/throttle with a key of 4000 bytes: %d %s", res.StatusCode, body)
	}
	// The second unit of the burst, then none: the bucket HTTP charged.
	if r, err := rdb.Do(ctx, "CL.THROTTLE", long, 1, 1, 60).Int64Slice(); err != nil || r[0] != 0 || r[2] != 0 {
		t.Fatalf("CL.THROTTLE, the second unit: %v, %v", r, err)
	}
	if r, err := rdb.Do(ctx, "CL.THROTTLE", long, 1, 1, 60).Int64Slice(); err != nil || r[0] != 1 {
		t.Fatalf("CL.THROTTLE, over the limit: %v, %v", r, err)
	}
	if n, err := rdb.Exists(ctx, funnel.BoundKey(long)).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS of the hash: %v, %v", n, err)
	}
	if keys, err := rdb.DBSize(ctx).Result(); err != nil || keys != 1 {
		t.Fatalf("DBSIZE: %v, %v; want one key", keys, err)
	}
}
