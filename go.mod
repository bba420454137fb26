module github.com/funnelrl/funnel

go 1.25.0

require (
	github.com/redis/go-redis/v9 v9.17.3
	github.com/redis/rueidis v1.0.79
	golang.org/x/sys v0.47.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
)
