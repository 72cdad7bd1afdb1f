package quota_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	calls atomic.Int64
}

func (r *remote) Stats() keylimit.Stats { return keylimit.Stats{Remote: true} }

func (r *remote) Take(key string, n int) keylimit.Result {
	r.calls.Add(1)
	return r.TokenBucket.Take(key, n)
}

func (r *remote) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r.calls.Add(1)
	return r.TokenBucket.Admit(key, n)
}

func (r *remote) Refund(key string, a keylimit.Admission) {
	r.calls.Add(1)
	r.TokenBucket.Refund(key, a)
}

func (r *remote) Peek(key string) keylimit.Result {
	r.calls.Add(1)
	return r.TokenBucket.Peek(key)
}

// TestRefusedInProcessAsksNoRemotePolicy (issue 38): an in-memory policy of
// 1 a second and a remote one of 500 an hour, in either order, with and
// without a concurrency policy (a tier decided apart): of 100 requests of
// one key, the in-memory policy refuses 99, and the remote limiter is
// called once, for the one admitted (it was 100 times: a Peek per refusal,
// for the fields). A refusal's fields leave the remote policy out: its
// state is not known without a round trip. The in-memory policy is a
// Penalty, which counts every refusal: its ban of 50 refusals starts. With
// a remote concurrency policy first (remote-inflight), the Penalty is
// asked before it, and it too is called once and left out of the fields.
func TestRefusedInProcessAsksNoRemotePolicy(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		remoteFirst           bool
		inflight, remoteSlots bool
	}{{"memory-first", false, false, false}, {"remote-first", true, false, false}, {"remote-first/inflight", true, true, false},
		{"remote-first/remote-inflight", true, false, true}} {
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
			slots := &remoteSlots{Concurrency: newConcurrency(t, 1000, keylimit.WithClock(mock))}
			if tc.remoteSlots {
				ps = append([]quota.Policy{{Name: "inflight", Concurrency: slots}}, ps...)
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
			require.Equal(t, int64(1), rem.calls.Load(), "the remote limiter's calls for 100 requests")
			require.Equal(t, 499, rem.TokenBucket.Peek("k").Remaining, "the remote limiter's Remaining")
			if tc.remoteSlots {
				require.Equal(t, int64(1), slots.calls.Load(), "the remote concurrency limiter's calls for 100 requests")
				require.Equal(t, 999, slots.Concurrency.Peek("k").Remaining, "the remote concurrency limiter's Remaining")
			}
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

// remoteSlots is a Concurrency whose Stats say Remote, as a
// redislimit.Concurrency's do: it counts the calls that would be round
// trips, its Permits' Releases included.
type remoteSlots struct {
	*keylimit.Concurrency[string]
	calls atomic.Int64
}

func (c *remoteSlots) Stats() keylimit.Stats { return keylimit.Stats{Remote: true} }

func (c *remoteSlots) TryAcquire(key string, n int) (keylimit.Permit, keylimit.Result) {
	c.calls.Add(1)
	p, r := c.Concurrency.TryAcquire(key, n)
	if !r.Allowed {
		return p, r
	}
	return keylimit.NewPermit(func() {
		c.calls.Add(1)
		p.Release()
	}), r
}

func (c *remoteSlots) Peek(key string) keylimit.Result {
	c.calls.Add(1)
	return c.Concurrency.Peek(key)
}

// kind is how a policy of a test counts.
type kind string

const (
	rate    kind = "rate"        // a TokenBucket
	slots   kind = "concurrency" // a Concurrency
	charged kind = "charged"     // a TokenBucket charged by outcome, the whole cost
)

var kinds = []kind{rate, slots, charged}

// testPolicy is a Policy of a test and what the test reads of it.
type testPolicy struct {
	quota.Policy
	calls     *atomic.Int64        // a remote limiter's calls; nil in process
	remaining func(key string) int // the limiter's Remaining for key, read without a call
}

// newPolicy returns a Policy named name of kind k, n a key (n an hour for a
// rate, on mock's frozen time: nothing refills), remote if isRemote (its
// Stats say Remote, and it counts its calls).
func newPolicy(t *testing.T, name string, k kind, n int, isRemote bool, mock *clock.Mock) testPolicy {
	t.Helper()
	if k == slots {
		c := newConcurrency(t, n)
		p := testPolicy{Policy: quota.Policy{Name: name, Concurrency: c}, remaining: func(key string) int { return c.Peek(key).Remaining }}
		if isRemote {
			rc := &remoteSlots{Concurrency: c}
			p.Concurrency, p.calls = rc, &rc.calls
		}
		return p
	}
	b := newBucket(t, keylimit.PerHour(n), mock)
	p := testPolicy{Policy: quota.Policy{Name: name, Limiter: b}, remaining: func(key string) int { return b.Peek(key).Remaining }}
	if isRemote {
		rb := &remote{TokenBucket: b}
		p.Limiter, p.calls = rb, &rb.calls
	}
	if k == charged {
		p.Charge = chargeReported
	}
	return p
}

// TestRefusedInProcessCostsNoRemoteCall (issue 38): a policy in process
// with a quota of 1 and a remote one of 500, each of every kind (a rate, a
// concurrency policy, a rate charged by outcome), in either order: of 100
// requests of one key, the policy in process refuses 99, and the remote
// limiter is called once, for the one admitted. (A remote concurrency
// policy, or a remote charged one, beside a rate or charged policy in
// process was asked first, and gave back after each refusal: 199 calls.)
// The admitted request is counted by each policy exactly once, the refused
// ones by none; it holds its slots until it ends, when it is charged its
// whole cost, and a remote slot's release is the one call more.
func TestRefusedInProcessCostsNoRemoteCall(t *testing.T) {
	for _, local := range kinds {
		for _, far := range kinds {
			if local == slots && far == slots {
				continue // a tier holds one concurrency policy
			}
			for _, remoteFirst := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/remote-%s/remoteFirst=%v", local, far, remoteFirst), func(t *testing.T) {
					mock := clock.NewMock()
					lp := newPolicy(t, "local", local, 1, false, mock)
					rp := newPolicy(t, "remote", far, 500, true, mock)
					ps := []quota.Policy{lp.Policy, rp.Policy}
					if remoteFirst {
						ps[0], ps[1] = ps[1], ps[0]
					}
					d := newDecider(t, quota.Config{Policies: ps})
					var admitted []quota.Verdict
					for range 100 {
						v, err := d.Decide(context.Background(), "k", "", 1)
						require.NoError(t, err)
						if v.Action() == quota.Proceed {
							admitted = append(admitted, v)
						}
					}
					require.Len(t, admitted, 1, "admitted of 100")
					require.Equal(t, int64(1), rp.calls.Load(), "the remote limiter's calls for 100 decisions")
					require.Equal(t, [2]int{0, 499}, [2]int{lp.remaining("k"), rp.remaining("k")}, "Remaining (in process, remote), the admitted request in flight")
					admitted[0].FinishWith(quota.Outcome{Status: 200, Reported: -1})
					want, calls := [2]int{0, 499}, int64(1)
					if local == slots {
						want[0] = 1
					}
					if far == slots {
						want[1], calls = 500, 2
					}
					require.Equal(t, want, [2]int{lp.remaining("k"), rp.remaining("k")}, "Remaining (in process, remote), once it ended")
					require.Equal(t, calls, rp.calls.Load(), "the remote limiter's calls, once it ended")
				})
			}
		}
	}
}

// TestRemoteRefusalGivesBackInProcess: the in process policy is asked
// first, and what it took is given back when the remote one refuses. 16
// goroutines decide 25 requests each of one key, against a policy in
// process of 20 (a rate, or a rate charged by outcome) and a remote one of
// 5 (5 slots, or a rate charged by outcome), in either order, the admitted
// ones in flight until all are decided: exactly 5 are admitted, and the
// policy in process has 15 left, what the 5 took. Once they end, charged
// their whole cost, each policy has counted each of them once.
func TestRemoteRefusalGivesBackInProcess(t *testing.T) {
	for _, local := range []kind{rate, charged} {
		for _, far := range []kind{slots, charged} {
			for _, remoteFirst := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/remote-%s/remoteFirst=%v", local, far, remoteFirst), func(t *testing.T) {
					mock := clock.NewMock()
					lp := newPolicy(t, "local", local, 20, false, mock)
					rp := newPolicy(t, "remote", far, 5, true, mock)
					ps := []quota.Policy{lp.Policy, rp.Policy}
					if remoteFirst {
						ps[0], ps[1] = ps[1], ps[0]
					}
					d := newDecider(t, quota.Config{Policies: ps})
					var mu sync.Mutex
					var admitted []quota.Verdict
					var wg sync.WaitGroup
					for range 16 {
						wg.Go(func() {
							for range 25 {
								v, err := d.Decide(context.Background(), "k", "", 1)
								if err == nil && v.Action() == quota.Proceed {
									mu.Lock()
									admitted = append(admitted, v)
									mu.Unlock()
								}
							}
						})
					}
					wg.Wait()
					require.Len(t, admitted, 5, "admitted of 400")
					require.Equal(t, [2]int{15, 0}, [2]int{lp.remaining("k"), rp.remaining("k")}, "Remaining (in process, remote), the admitted in flight")
					for _, v := range admitted {
						v.FinishWith(quota.Outcome{Status: 200, Reported: -1})
					}
					want := [2]int{15, 0}
					if far == slots {
						want[1] = 5
					}
					require.Equal(t, want, [2]int{lp.remaining("k"), rp.remaining("k")}, "Remaining (in process, remote), once they ended")
				})
			}
		}
	}
}

// TestRefusedInProcessGivesBackInProcess: with a remote concurrency policy
// first, two rate policies in process are asked before it, one by one; a
// request the second refuses gives back what the first took, and asks the
// remote policy nothing. Of 5 requests under "hour" 10 and "second" 1, one
// is admitted: "hour" counted it alone, and the remote slots were asked
// once.
func TestRefusedInProcessGivesBackInProcess(t *testing.T) {
	mock := clock.NewMock()
	slots := &remoteSlots{Concurrency: newConcurrency(t, 100)}
	hour, second := newBucket(t, keylimit.PerHour(10), mock), newBucket(t, keylimit.PerSecond(1), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "inflight", Concurrency: slots}, {Name: "hour", Limiter: hour}, {Name: "second", Limiter: second},
	}})
	var actions []quota.Action
	for range 5 {
		got, _ := decide(t, d, "k", "", 1)
		actions = append(actions, got.action)
	}
	require.Equal(t, []quota.Action{quota.Proceed, quota.Refuse, quota.Refuse, quota.Refuse, quota.Refuse}, actions)
	require.Equal(t, 9, hour.Peek("k").Remaining, "what hour took of the refused requests was given back")
	require.Equal(t, int64(1), slots.calls.Load(), "the remote slots' calls")
	require.Equal(t, 99, slots.Concurrency.Peek("k").Remaining, "the admitted request holds its slot")
}

// hangsUp is a remote limiter whose AdmitContext admits, and then ends the
// request's context and fails, as a Redis limiter's failure policy
// admits a request whose client hung up while Redis did not answer.
type hangsUp struct {
	*remote
	cancel func()
}

func (l *hangsUp) AdmitContext(_ context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	r, a := l.Admit(key, n)
	l.cancel()
	return r, a, errors.New("the store is down: admitted by the failure policy")
}

func (l *hangsUp) RefundContext(_ context.Context, key string, a keylimit.Admission) error {
	l.Refund(key, a)
	return nil
}

// TestContextEndedGivesBackEverything: a request whose context ends while
// a remote policy charged by outcome fails (its failure policy admitting)
// gets the context's error, and holds nothing anywhere: the slot and the
// rate policy in process asked before are given back, and so is the
// remote policy's own admission (it was kept: only the charged policies
// before it were given back).
func TestContextEndedGivesBackEverything(t *testing.T) {
	mock := clock.NewMock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	far := &hangsUp{remote: &remote{TokenBucket: newBucket(t, keylimit.PerHour(500), mock)}, cancel: cancel}
	hour := newBucket(t, keylimit.PerHour(10), mock)
	inflight := newConcurrency(t, 2)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "charged", Limiter: far, Charge: chargeReported},
		{Name: "hour", Limiter: hour},
		{Name: "inflight", Concurrency: inflight},
	}})
	_, err := d.Decide(ctx, "k", "", 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 500, far.TokenBucket.Peek("k").Remaining, "the remote policy's admission, given back")
	require.Equal(t, 10, hour.Peek("k").Remaining, "the rate policy in process, given back")
	require.Equal(t, 2, inflight.Peek("k").Remaining, "the slot, given back")
}
