package redislimit

import (
	"testing"

	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// serverOfItsOwn starts a redis-server for the test alone and returns a
// client of it (context deadlines honoured); both end with the test. The
// package's external tests share servers through helpers_test.go.
func serverOfItsOwn(t testing.TB) *redis.Client {
	t.Helper()
	s, err := redisserver.Start(0)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}
