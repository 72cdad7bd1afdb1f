package redislimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// instance is one instance's penalty around its fixed window, both on Redis.
func instance(t *testing.T, c redis.UniversalClient, mock *clock.Mock, b keylimit.Ban, opts ...redislimit.Option) (*redislimit.Penalty, *redislimit.FixedWindow) {
	t.Helper()
	opts = append([]redislimit.Option{redislimit.WithTimeout(patient), redislimit.WithClock(mock), redislimit.WithScriptClock(mock)}, opts...)
	w, err := redislimit.NewFixedWindow(c, "login", keylimit.PerHour(1), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	p, err := redislimit.NewPenalty(c, "login", w, b, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p, w
}

// decisions is sent without the CONFIG GETs of a new limiter's check of
// the server (health.go), which runs in the background.
func decisions(sent map[string]int64) map[string]int64 {
	delete(sent, "config|get")
	return sent
}

// TestPenaltyFleetSharesOneBan: refusals on one instance ban the key on
// Redis; the other instances hear of it (and one that did not learns it
// from its limiter's first refusal), and then answer the key in process:
// INFO commandstats counts no EVALSHA, no command at all, over a flood.
func TestPenaltyFleetSharesOneBan(t *testing.T) {
	s := newServer(t) // its own server: commandstats counts only this test
	mock := newMock()
	b := keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour}
	a, _ := instance(t, s.client(t), mock, b)
	other, _ := instance(t, s.client(t), mock, b)
	key := testKey(t, "alice")

	require.True(t, a.Allow(key))
	r := a.Take(key, 1)
	require.False(t, r.Allowed)
	require.False(t, r.Banned, "one refusal: %v", r)
	r = a.Take(key, 1)
	require.True(t, r.Banned, "two refusals within a minute: %v", r)
	require.Equal(t, time.Hour, r.RetryAfter)
	require.Equal(t, uint64(1), a.Stats().Bans)

	require.Eventually(t, func() bool { return other.Peek(key).Banned }, patient, time.Millisecond,
		"the other instance hears of the ban")
	before := s.commandStats(t)
	const flood = 1000
	for i := range flood {
		for _, p := range []*redislimit.Penalty{a, other} {
			r := p.Take(key, 1+i%3)
			require.True(t, r.Banned, "flood call %d: %v", i, r)
			require.Equal(t, 1, r.Limit)
		}
	}
	after := s.commandStats(t)
	require.Equal(t, before["evalsha"], after["evalsha"], "EVALSHA while the ban is known")
	require.Empty(t, decisions(s.sentSince(t, before)), "commands sent while the ban is known")
	require.Equal(t, uint64(flood), a.Stats().BanRefused)
	require.Equal(t, uint64(flood), other.Stats().BanRefused)
	require.Zero(t, other.Stats().Bans, "the ban is a's")

	// An instance made after the announcement learns the ban at its
	// limiter's first refusal: one call for the window, one to count.
	late, _ := instance(t, s.client(t), mock, b)
	stats := s.commandStats(t)
	r = late.Take(key, 1)
	require.True(t, r.Banned, "%v", r)
	require.Equal(t, time.Hour, r.RetryAfter)
	require.Equal(t, map[string]int64{"evalsha": 2}, decisions(s.sentSince(t, stats)))
	stats = s.commandStats(t)
	require.True(t, late.Take(key, 1).Banned)
	require.Empty(t, decisions(s.sentSince(t, stats)), "then it knows")

	// The ban ends on every instance at once; the next window admits.
	mock.Add(time.Hour - time.Nanosecond)
	require.True(t, other.Take(key, 1).Banned)
	mock.Add(time.Nanosecond)
	require.True(t, other.Allow(key), "the ban and the window are over")
	r = a.Take(key, 1)
	require.False(t, r.Allowed)
	require.False(t, r.Banned, "the refusals count afresh after a ban: %v", r)
}

// TestPenaltyResetLiftsTheBan: Reset forgets the ban on Redis and here.
func TestPenaltyResetLiftsTheBan(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	p, _ := instance(t, s.client(t), mock, keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	key := testKey(t, "k")
	require.True(t, p.Allow(key))
	require.True(t, p.Take(key, 1).Banned)
	p.Reset(key)
	require.True(t, p.Allow(key))
	n, err := s.client(t).Exists(t.Context(), p.Prefix()+"{"+key+"}", p.Prefix()+"{"+key+"}:ban").Result()
	require.NoError(t, err)
	require.Zero(t, n, "no state left on Redis")
}
