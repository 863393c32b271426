package redisindex_test

import "github.com/redis/go-redis/v9"

// nilClient is a client that is never used to connect (key naming tests).
func nilClient() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) }
