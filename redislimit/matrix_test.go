package redislimit_test

import (
	"testing"

	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/keylimit/keylimit/redislimit/internal/matrixstore"
	"github.com/redis/go-redis/v9"
)

// TestMatrix runs the composition matrix (limitertest.RunMatrix) on the
// Redis stores: redis-server and a Redis Cluster, whose scripts are given a
// mock clock's time (WithScriptClock: a real server's TIME cannot be
// moved). The in-memory store runs it in the root module's TestMatrix, and
// miniredis, whose own TIME the matrix moves, so that there the scripts
// run as in production on Redis's time, in the fleet demo module's (which
// has miniredis already: this package's tests do not compile it).
func TestMatrix(t *testing.T) {
	cl := theCluster(t)
	store := func(name string, newClient func(t testing.TB) redis.UniversalClient) limitertest.Harness {
		mock := newMock()
		// Announcements on (the package's tests turn them off): the default
		// failure policy as it runs in production.
		opts := append(onMock(mock), redislimit.WithFleetBeats(true))
		return matrixstore.New(t, name, matrixstore.Clock{Mock: mock, Advance: mock.Add}, newClient, opts...)
	}
	limitertest.RunMatrix(t,
		// The server is the one the tests run on: redis-server, or
		// valkey-server with KEYLIMIT_REDIS_SERVER (CI runs both).
		store(redisserver.Binary(), func(t testing.TB) redis.UniversalClient { return shared.client(t) }),
		store("Cluster of "+redisserver.Binary(), func(t testing.TB) redis.UniversalClient { return clusterClient(t, cl) }),
	)
}
