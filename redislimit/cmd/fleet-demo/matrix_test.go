package main

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit/internal/matrixstore"
	"github.com/redis/go-redis/v9"
)

// TestMatrixOnMiniredis runs the composition matrix (limitertest.RunMatrix)
// on the Redis limiters over miniredis, the demo's embedded Redis, whose
// own TIME the matrix moves (SetTime), so that the scripts run as in
// production, on Redis's time. It is the matrix's miniredis store, here
// rather than in redislimit's TestMatrix (redis-server and a Cluster) so
// that redislimit's tests do not compile miniredis.
func TestMatrixOnMiniredis(t *testing.T) {
	mini := miniredis.RunT(t)
	mock := clock.NewMock()
	mock.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	mini.SetTime(mock.Now())
	advance := func(d time.Duration) {
		mock.Add(d)
		mini.SetTime(mock.Now())
		if d > 0 {
			mini.FastForward(d) // what expires in d does
		}
	}
	newClient := func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: mini.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	limitertest.RunMatrix(t, matrixstore.New(t, "miniredis", matrixstore.Clock{Mock: mock, Advance: advance}, newClient, keylimit.WithClock(mock)))
}
