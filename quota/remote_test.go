package quota_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// remote is a TokenBucket whose Stats say Remote, as a redislimit
// limiter's do: it counts the calls that would be round trips.
type remote struct {
	*keylimit.TokenBucket[string]
	calls int
}

func (r *remote) Stats() keylimit.Stats { return keylimit.Stats{Remote: true} }

func (r *remote) Take(key string, n int) keylimit.Result {
	r.calls++
	return r.TokenBucket.Take(key, n)
}

func (r *remote) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r.calls++
	return r.TokenBucket.Admit(key, n)
}

func (r *remote) Refund(key string, a keylimit.Admission) {
	r.calls++
	r.TokenBucket.Refund(key, a)
}

func (r *remote) Peek(key string) keylimit.Result {
	r.calls++
	return r.TokenBucket.Peek(key)
}

// TestRefusedInProcessAsksNoRemotePolicy (issue 38): an in-memory policy of
// 1 a second and a remote one of 500 an hour, in either order, with and
// without a concurrency policy (a tier decided apart): of 100 requests of
// one key, the in-memory policy refuses 99, and the remote limiter is
// called once, for the one admitted (it was 100 times: a Peek per refusal,
// for the fields). A refusal's fields leave the remote policy out: its
// state is not known without a round trip. The in-memory policy is a
// Penalty, which counts every refusal: its ban of 50 refusals starts.
func TestRefusedInProcessAsksNoRemotePolicy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		remoteFirst bool
		inflight    bool
	}{{"memory-first", false, false}, {"remote-first", true, false}, {"remote-first/inflight", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			mock := clock.NewMock()
			rem := &remote{TokenBucket: newBucket(t, keylimit.PerHour(500), mock)}
			pen, err := keylimit.NewPenalty[string](newBucket(t, keylimit.PerSecond(1), mock),
				keylimit.Ban{Refusals: 50, Within: time.Minute, For: time.Minute}, keylimit.WithClock(mock))
			require.NoError(t, err)
			t.Cleanup(func() { pen.Close() })
			ps := []quota.Policy{{Name: "second", Limiter: pen}, {Name: "hour", Limiter: rem}}
			if tc.remoteFirst {
				ps[0], ps[1] = ps[1], ps[0]
			}
			if tc.inflight {
				ps = append(ps, quota.Concurrent("inflight", 1000, keylimit.WithClock(mock)))
			}
			d := newDecider(t, quota.Config{Policies: ps})
			admitted, banned := 0, 0
			var last decided
			for range 100 {
				got, dec := decide(t, d, "k", "", 1)
				if got.action == quota.Proceed {
					admitted++
				}
				if dec.Result.Banned {
					banned++
				}
				last = got
			}
			require.Equal(t, 1, admitted, "admitted of 100")
			require.Equal(t, 1, rem.calls, "the remote limiter's calls for 100 requests")
			require.Equal(t, 499, rem.TokenBucket.Peek("k").Remaining, "the remote limiter's Remaining")
			require.Equal(t, 50, banned, "refusals by the ban: from the 50th refusal on, the 51st request")
			require.Equal(t, quota.Refuse, last.action)
			require.Equal(t, "second", last.policy, "the binding policy")
			want := decided{quota.Refuse, "second", `"second";r=0;t=1`, `"second";q=1;w=1`, "60"}
			if tc.inflight {
				want.rateLimit += `, "inflight";r=999` // the admitted request is not finished
				want.rateLimitPolicy += `, "inflight";q=1000;qu="concurrent-requests"`
			}
			require.Equal(t, want, last, "a refusal's fields: without the remote policy")
		})
	}
}
