package redislimit

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Leases at scale, simulated (issue 39): a fleet of instances leasing one
// hot token bucket, in one process on a simulated clock, deterministic.
// Redis's side is paceModel, a Go model of the script's bucket lease call
// (lua/bucket.lua's paced and lease, with decide.lua's give-back) that
// TestPaceModelMatchesScript holds to the script on random calls; each
// instance's side is simInstance, a model of lease.go's: a lease admits
// until spent or its time is up, a fetch sized as want sizes it, the waits
// of fetched (short, and the pace), and the sweeper, which forgets a key
// that had no fetch nor wait for two lease times (refusedIdle after a
// refusal) once its lease is over (what that held given back in a call of
// its own).

// paceModel is one key's state in Redis as the script keeps it: the
// bucket's TAT (absolute ns; has: there is a state) and the longest lease
// time written (hold), and the fleet's sorted set (instance id → ms of its
// last lease call), which expires at setEnd (ms) unless noExpiry (the
// tests' clock, under which the script's keys live an hour longer).
type paceModel struct {
	tat      int64
	has      bool
	hold     int64
	fleet    map[string]int64
	setEnd   int64
	noExpiry bool
	// For the simulation's account of what the fleet did not admit: the
	// ns of refill a full bucket lost (from seen, the last call's time),
	// and the events given back.
	full, seen, given, skipped int64
}

// account counts the refill a full bucket lost before a call at now.
func (m *paceModel) account(now int64) {
	if m.seen != 0 && now > max(m.tat, m.seen) {
		m.full += now - max(m.tat, m.seen)
	}
	m.seen = now
}

// paceReply is the script's reply to a lease, as numbers (mark is the TAT
// written, absolute ns; 0: none).
type paceReply struct {
	allowed                 bool
	remaining, retry, reset int64
	mark, leased, pace      int64
	life                    int64 // a paced lease's time (0: hold)
	fleet                   int64 // the fleet the call counted (not in the reply)
}

// text is r as the script writes it.
func (r paceReply) text() string {
	allowed, mark := 0, "0"
	if r.allowed {
		allowed = 1
	}
	if r.mark != 0 {
		mark = strconv.FormatInt(r.mark, 10)
	}
	return fmt.Sprintf("%d %d %d %d %s %d %d %d", allowed, r.remaining, r.retry, r.reset, mark, r.leased, r.pace, r.life)
}

// floorDiv is Lua's math.floor(a / b) on doubles.
func floorDiv(a, b int64) int64 { return int64(math.Floor(float64(a) / float64(b))) }

// count is lua/bucket.lua's fleet: id's call at now, and the instances
// that leased lately.
func (m *paceModel) count(now, period, interval int64, id string) int64 {
	ms := now / 1e6
	if m.fleet == nil || !m.noExpiry && ms >= m.setEnd {
		m.fleet = map[string]int64{}
	}
	m.fleet[id] = ms
	c := int64(len(m.fleet))
	w := int64(math.Ceil(float64(max(64*period, 3*minShare*c*interval)) / 1e6))
	gone := int64(0)
	for i, at := range m.fleet {
		if at < ms-w {
			delete(m.fleet, i)
			gone++
		}
	}
	m.setEnd = ms + 2*w
	return max(c-gone, 1)
}

// take is take_bucket.lua's plain take of k at now (what lease.go sends
// for a key that wants no lease): the fleet is not counted.
func (m *paceModel) take(now, interval, tau, k int64) paceReply {
	m.account(now)
	m.expire(now)
	base := int64(0)
	if m.has {
		base = max(m.tat-now, 0)
	}
	burst := floorDiv(tau, interval)
	remaining := func(a int64) int64 { return min(max(floorDiv(tau-a, interval), 0), burst) }
	if base+k*interval > tau {
		return paceReply{remaining: remaining(base), retry: base + k*interval - tau, reset: base}
	}
	next := base + k*interval
	m.tat, m.has = now+next, true
	return paceReply{allowed: true, remaining: remaining(next), reset: next, mark: m.tat}
}

// expire drops a state whose key has expired (at its TAT), outside the
// tests' clock.
func (m *paceModel) expire(now int64) {
	if !m.noExpiry && m.has && m.tat <= now {
		m.has, m.hold = false, 0
	}
}

// refund is the script's refund of give events of the admission (a lease)
// whose mark is mark, at now: what the sweeper sends for a lease that
// ended holding events (bucket.lua's giveback; the reply is not modelled).
func (m *paceModel) refund(now, interval, tau, give, mark int64) {
	m.account(now)
	m.expire(now)
	if m.has {
		m.giveBack(now, interval, tau, give, mark)
	}
}

// giveBack is bucket.lua's giveback of give events of the admission whose
// mark is mark, at now, on a stored state, and returns the TAT ahead of now
// after it.
func (m *paceModel) giveBack(now, interval, tau, give, mark int64) int64 {
	ahead := m.tat - now
	skew := max(ahead-tau, 0)
	back := min(give*interval, mark-now-skew-m.hold, ahead-skew)
	if back > 0 {
		m.given += back / interval
		if ahead-back > 0 {
			m.tat = now + ahead - back
		} else {
			m.has, m.hold = false, 0
		}
		ahead -= back
	}
	return ahead
}

// lease is the script's lease call on a bucket with the fleet's set, as
// decide.lua makes it: give back give events of the lease whose mark is
// mark, then paced (lua/bucket.lua).
func (m *paceModel) lease(now, interval, tau, k, want, hold, give, mark, period int64, id string) paceReply {
	m.account(now)
	m.expire(now)
	// read
	ahead, stored, sHold := int64(0), m.has, m.hold
	if m.has {
		ahead = m.tat - now
	}
	base := max(ahead, 0)
	burst := floorDiv(tau, interval)
	remaining := func(a int64) int64 { return min(max(floorDiv(tau-a, interval), 0), burst) }
	store := func(a int64) int64 {
		m.tat, m.has, m.hold = now+a, true, sHold
		return m.tat
	}
	if give > 0 && stored {
		ahead = m.giveBack(now, interval, tau, give, mark)
		base = max(ahead, 0)
	}
	a := m.count(now, period, interval, id)
	large := a > 1 && minShare*a*interval > period
	if base+k*interval > tau {
		pace := int64(0)
		if large {
			pace = min(floorDiv(k*a*interval, 2), maxPace*period)
		}
		return paceReply{remaining: remaining(base), retry: base + k*interval - tau, reset: base, pace: pace, fleet: a}
	}
	grant := func(want int64, share bool) (int64, int64, int64) {
		life := hold
		if share {
			life = max(hold, base)
		}
		from := max(base, life)
		x := min(want, floorDiv(tau-from, interval)-k)
		left := floorDiv(tau-base, interval) - k
		if !share && float64(left) < min(float64(burst)/maxLeaseShare, float64(life)/float64(interval)) {
			x = min(x, floorDiv(left, leaseShare))
		}
		if x < 1 {
			return 0, base + k*interval, 0
		}
		sHold = max(sHold, life)
		m.skipped += from - base
		return x, from + (k+x)*interval, life
	}
	if !large {
		x, next, _ := grant(want, false)
		return paceReply{allowed: true, remaining: remaining(next), reset: next, mark: store(next), leased: x, fleet: a}
	}
	x, next, life := grant(max(min(want, minShare-k), 0), true)
	most := floorDiv(tau-hold, interval)
	pace := int64(0)
	if most > 0 {
		set := min(2*minShare, floorDiv(most, 2))
		f := min(float64(most-remaining(next))/float64(most-set), 2)
		if f > 0 {
			pace = int64(math.Floor(min(float64((k+x)*a*interval)*f, float64(maxPace*period))))
		}
	}
	return paceReply{allowed: true, remaining: remaining(next), reset: next, mark: store(next), leased: x, pace: pace, life: life, fleet: a}
}

// TestPaceModelMatchesScript: on random sequences of lease calls
// (instances of fleets of 1 to 300, times that move forward by up to a few
// lease times, limits, lease times, wants, give-backs of earlier leases),
// paceModel replies exactly what the script replies on the server, call
// after call, and leaves the same TAT, the time passed as the tests pass
// it: so the simulation below simulates the script. Paced replies are a
// good part of the calls.
func TestPaceModelMatchesScript(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(39, 2))
	calls, paced, gives := 0, 0, 0
	for seq := range 40 {
		interval := []int64{1000, 100_000, 1_000_000, 3_333_333}[r.IntN(4)]
		burst := 1 + r.Int64N(200)
		tau := burst * interval
		period := []int64{1e6, 20e6, 100e6}[r.IntN(3)]
		hold := min(period, tau/2)
		fleet := 1 + r.IntN(300)
		now := int64(1_764_650_000)*1e9 + r.Int64N(1e9)
		key := fmt.Sprintf("sim:%d", seq)
		keys := []string{key, key + fleetSuffix}
		m := paceModel{noExpiry: true}
		var lastMark, lastLeased int64
		for i := range 200 {
			// Mostly calls an interval or two apart, on a bucket they drain;
			// now and then a pause of up to a few lease times.
			now += r.Int64N(2 * interval)
			if r.IntN(10) == 0 {
				now += r.Int64N(3 * period)
			}
			k := 1 + r.Int64N(min(burst, 3))
			want := r.Int64N(max(burst/maxLeaseShare, 1) + 1)
			id := strconv.Itoa(r.IntN(fleet))
			give, mark := int64(0), int64(0)
			if lastLeased > 0 && r.IntN(4) == 0 {
				give, mark = 1+r.Int64N(lastLeased), lastMark
				gives++
			}
			markArg := any("0")
			if mark != 0 {
				markArg = strconv.FormatInt(mark, 10)
			}
			got, err := script.Run(ctx, c, keys, "lease", k, "bucket", interval, tau, markArg, want, hold, give, period, id,
				now/1e9, now%1e9).Text()
			require.NoError(t, err)
			w := m.lease(now, interval, tau, k, want, hold, give, mark, period, id)
			require.Equal(t, w.text(), got, "sequence %d call %d: k %d want %d give %d, interval %d tau %d period %d, instance %s of %d (fleet %d)",
				seq, i, k, want, give, interval, tau, period, id, fleet, w.fleet)
			state, err := c.Get(ctx, key).Result()
			if m.has {
				require.NoError(t, err)
				require.Equal(t, strconv.FormatInt(m.tat, 10), strings.Fields(state)[0], "sequence %d call %d: the TAT", seq, i)
			} else {
				require.ErrorIs(t, err, redis.Nil, "sequence %d call %d: no state", seq, i)
			}
			if w.allowed && w.leased > 0 {
				lastMark, lastLeased = w.mark, w.leased
			}
			calls++
			if w.pace > 0 {
				paced++
			}
		}
	}
	require.Greater(t, paced, calls/10, "calls paced, of %d", calls)
	require.Greater(t, gives, calls/10, "calls that gave back, of %d", calls)
}

// simConfig is one simulated run: a fleet of n instances on one key of
// rate events a second and burst, leases of d, for run, each call taking
// rtt there and back (the script runs at its middle). A fraction hot of
// the instances ask as BenchmarkLeasedFleet's goroutines do: without
// pause, sleeping for RetryAfter when refused; the others ask slow times a
// second each, at random. An instance that sleeps, or waits for a reply,
// wakes up to late after it could, at random, as goroutines on a busy host
// do (a lease's time counts from its call, so a late reply shortens it).
type simConfig struct {
	n           int
	rate, burst int64
	d, run, rtt time.Duration
	hot, slow   float64
	late        time.Duration
	seed        uint64
}

// simResult is what a run measured: the events admitted and the bound
// (burst + rate × run), the script calls, and the longest an instance that
// asks without pause went without an admission.
type simResult struct {
	admitted, bound, calls int64
	starved                time.Duration
	// Where the rest of the bound went: events leased and never spent
	// (less those given back), refill lost to a full bucket, and the
	// events counted ahead of the run's end; and the events the
	// instances that ask without pause admitted.
	unspent, full, skipped, ahead, hotAdmitted int64
}

// simLease is a lease as lease.go's grant keeps it.
type simLease struct {
	until, left, mark int64
}

// simInstance is one instance: its key's entry as lease.go's leaseKey
// keeps it, and its goroutine.
type simInstance struct {
	id  string
	hot bool
	// leaseKey
	cur               *simLease
	leased            *simLease // the last fetch's lease
	known             bool      // e.k is set: the key has been fetched
	back, size, asked int64
	short, paced      bool
	refused           bool  // the last fetch was refused
	wait, deny        int64 // no fetch before; refused in process before (the deny cache)
	unused            int64 // what the last lease left when it ended
	// the goroutine
	next     int64 // when it acts next
	last     int64 // its last admission
	fetching bool
	callAt   int64
	want     int64
	plain    bool
	reply    paceReply
}

// simQueue orders the instances by their next action.
type simQueue []*simInstance

func (q simQueue) Len() int           { return len(q) }
func (q simQueue) Less(i, j int) bool { return q[i].next < q[j].next }
func (q simQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)        { *q = append(*q, x.(*simInstance)) }
func (q *simQueue) Pop() any          { old := *q; x := old[len(old)-1]; *q = old[:len(old)-1]; return x }

var simStats map[string]int64

// simulate runs c: deterministic for its seed.
func simulate(c simConfig) simResult {
	r := rand.New(rand.NewPCG(c.seed, 39))
	interval := int64(time.Second) / c.rate
	tau := c.burst * interval
	d := int64(c.d)
	hold := min(d, tau/2) // leases.time
	most := c.burst / maxLeaseShare
	rtt := int64(c.rtt)
	end := int64(c.run)
	start := int64(1_764_650_000) * 1e9 // Redis's clock is this plus the simulated time
	var m paceModel
	res := simResult{bound: c.burst + end/interval}
	late := func() int64 {
		if c.late <= 0 {
			return 0
		}
		return r.Int64N(int64(c.late) + 1)
	}
	slowGap := func() int64 { return int64(r.ExpFloat64() * float64(time.Second) / c.slow) }
	q := make(simQueue, c.n)
	for i := range q {
		in := &simInstance{id: strconv.Itoa(i), hot: float64(i) < c.hot*float64(c.n)}
		in.next = r.Int64N(max(interval, 1)) // they start within an interval of each other
		if !in.hot {
			in.next = slowGap()
		}
		q[i] = in
	}
	heap.Init(&q)
	admit := func(in *simInstance, now, events int64) {
		res.admitted += events
		if in.hot {
			res.hotAdmitted += events
			res.starved = max(res.starved, time.Duration(now-in.last))
		}
		in.last = now
	}
	// idle: leases.idleOf, how long after its last fetch or wait the
	// sweeper forgets an instance's key.
	idle := func(in *simInstance) int64 {
		if in.refused && most > 0 {
			return refusedIdle * d
		}
		return 2 * d
	}
	// sleep: the goroutine is refused with RetryAfter retry at now.
	sleep := func(in *simInstance, now, retry int64) {
		if in.hot {
			in.next = now + max(retry, 0) + late()
		} else {
			in.next = now + slowGap()
		}
	}
	for q[0].next < end {
		in := q[0]
		now := in.next
		if in.fetching {
			in.fetching = false
			w := in.reply
			// fetched
			in.back, in.known = now, true
			in.asked, in.size = 1+in.want, 0
			in.leased = nil
			if w.allowed {
				in.size = 1 + w.leased
			}
			in.short = in.want > 0 && in.size < in.asked && (!w.allowed || w.remaining < leaseShare*(in.asked-in.size))
			in.paced = w.pace > 0
			if w.allowed && w.leased > 0 {
				life := hold
				if w.life > 0 {
					life = w.life
				}
				in.cur = &simLease{until: in.callAt + life, left: w.leased, mark: w.mark}
				in.leased = in.cur
			}
			in.wait = 0
			in.refused = !w.allowed
			if (in.short || in.paced) && !in.plain {
				var wait int64
				if in.short {
					wait = w.retry
					x := min(d, leaseShare*(in.asked-in.size)*interval, max(w.reset-hold, 0))
					wait = max(wait, x/2+r.Int64N(x/2+1))
				}
				pace := w.pace
				if !w.allowed && pace > 0 {
					pace = pace/2 + r.Int64N(pace/2+1)
				}
				in.wait = in.callAt + max(wait, pace)
			}
			if !w.allowed {
				in.deny = in.callAt + w.retry
				sleep(in, now, w.retry)
			} else {
				admit(in, now, 1)
				if in.hot {
					in.next = now // asks again at once
				} else {
					in.next = now + slowGap()
				}
			}
			heap.Fix(&q, 0)
			continue
		}
		// A Take of one event at now. The sweeper has forgotten the key if
		// it had no fetch nor wait for idle, its lease over: what that
		// held was given back at its end, in a call of its own.
		if p := in.cur; in.known && (p == nil || now >= p.until) && now-max(in.callAt, in.wait) >= idle(in) {
			if p != nil && p.left > 0 {
				give := p.left
				res.unspent += give
				m.refund(start+now, interval, tau, give, p.mark) // at its end, or later: it gives back no more
				res.calls++
			}
			*in = simInstance{id: in.id, hot: in.hot, next: in.next, last: in.last, deny: in.deny}
		}
		if p := in.cur; p != nil && now < p.until && p.left > 0 {
			if in.hot {
				admit(in, now, p.left) // spent at once
				p.left = 0
				in.next = now
			} else {
				admit(in, now, 1)
				p.left--
				in.next = now + slowGap()
			}
			heap.Fix(&q, 0)
			continue
		}
		if now < in.wait {
			sleep(in, now, in.wait-now)
			heap.Fix(&q, 0)
			continue
		}
		if now < in.deny {
			sleep(in, now, in.deny-now)
			heap.Fix(&q, 0)
			continue
		}
		// A fetch: want as lease.go's want, give what the lease left.
		var est int64
		if in.known {
			var unspent int64
			if p := in.leased; p != nil {
				if p == in.cur && p.left >= 0 {
					unspent = p.left
				} else {
					unspent = in.unused
				}
			}
			switch elapsed := now - in.back; {
			case in.paced && unspent > 0:
				est = 1
			case in.paced:
				est = max(2*in.size, 2)
			case in.short:
				est = in.asked
			case in.refused && elapsed < d:
				est = 2
			case elapsed <= 0:
				est = 2 * in.size
			default:
				est = int64(min(float64(in.size-unspent)*float64(d)/float64(elapsed), float64(2*in.size)))
			}
		}
		in.want = min(max(est-1, 0), most)
		var give, mark int64
		if p := in.cur; p != nil {
			give, mark = p.left, p.mark
			res.unspent += p.left
			in.unused = p.left
			p.left = -1
			in.cur = nil
		}
		at := start + now + rtt/2
		in.plain = in.want == 0 && give == 0 && !in.paced && !(in.refused && most > 0)
		if in.plain {
			in.reply = m.take(at, interval, tau, 1)
		} else {
			in.reply = m.lease(at, interval, tau, 1, in.want, hold, give, mark, d, in.id)
		}
		res.calls++
		if simStats != nil {
			switch {
			case in.plain && in.reply.allowed:
				simStats["plain admitted"]++
			case in.plain:
				simStats["plain refused"]++
			case !in.reply.allowed:
				simStats["lease refused"]++
			case in.reply.pace > 0:
				simStats["paced"]++
				simStats["paced events"] += 1 + in.reply.leased
				simStats["pace µs"] += in.reply.pace / 1000
			default:
				simStats["unpaced"]++
				simStats["unpaced events"] += 1 + in.reply.leased
			}
		}
		// The goroutine waits for the reply, and wakes late as from a sleep:
		// a lease's time counts from the call.
		in.callAt, in.fetching, in.next = now, true, now+rtt+late()
		heap.Fix(&q, 0)
	}
	for _, in := range q {
		if in.hot {
			res.starved = max(res.starved, time.Duration(end-in.last))
		}
		if p := in.cur; p != nil && p.left > 0 {
			res.unspent += p.left
		}
	}
	m.account(start + end)
	res.unspent -= m.given
	res.full = m.full / interval
	res.skipped = m.skipped / interval
	res.ahead = max(m.tat-start-end, 0) / interval
	return res
}

// BenchmarkLeaseSim reports, for fleets of 10 to 10,000 instances on one
// key of 10,000/s with a burst of 100 and leases of 20 ms (issue 39's), 3
// s simulated, or 5 granted lease periods if longer (20 s at 10,000): the fraction of the bound admitted, the longest an instance
// that asks without pause went without an admission (in configured lease
// times, and in the lease periods the share rule grants: max(lease time,
// minShare × instances × interval)), and the script calls per second and
// per admission. uniform: every instance asks without pause; skewed: a
// tenth do, the others ask 5 times a second each; late5ms, late20ms:
// uniform, on a host that wakes a goroutine up to 5 or 20 ms late, at
// random (this machine's, loaded: 5 to 50 ms, at worst 1.6 s).
func BenchmarkLeaseSim(b *testing.B) {
	for _, demand := range []struct {
		name      string
		hot, slow float64
		late      time.Duration
	}{{"uniform", 1, 0, 0}, {"skewed", 0.1, 5, 0}, {"late5ms", 1, 0, 5 * time.Millisecond}, {"late20ms", 1, 0, 20 * time.Millisecond}} {
		sizes := []int{10, 100, 1000, 10_000}
		if testing.Short() {
			sizes = sizes[:2] // CI runs each benchmark once, to see it run: 10,000 takes up to a minute
		}
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/instances=%d", demand.name, n), func(b *testing.B) {
				c := simConfig{n: n, rate: 10_000, burst: 100, d: 20 * time.Millisecond,
					rtt: 200 * time.Microsecond, hot: demand.hot, slow: demand.slow, late: demand.late, seed: 1}
				period := max(c.d, time.Duration(minShare*int64(n))*time.Second/time.Duration(c.rate))
				c.run = max(3*time.Second, 5*period)
				var res simResult
				for range b.N {
					res = simulate(c)
				}
				b.ReportMetric(float64(res.admitted)/float64(res.bound), "admitted/bound")
				b.ReportMetric(float64(res.starved)/float64(c.d), "starved/lease")
				b.ReportMetric(float64(res.starved)/float64(period), "starved/period")
				b.ReportMetric(float64(res.calls)/c.run.Seconds(), "calls/s")
				b.ReportMetric(float64(res.calls)/float64(max(res.admitted, 1)), "calls/admission")
				if testing.Verbose() {
					b.Logf("lost %d of %d: unspent %d, full bucket %d, skipped to a lease's end %d, ahead %d; hot admitted %d",
						res.bound-res.admitted, res.bound, res.unspent, res.full, res.skipped, res.ahead, res.hotAdmitted)
				}
			})
		}
	}
}

// TestLeaseSimShareRule holds the simulated fleet (deterministic: the
// model is the script's) to issue 39's targets on one key of 10,000/s with
// a burst of 100 and leases of 20 ms: never above the bound; at least 0.9
// of it at 10, 100 and 1,000 instances; no instance that asks without
// pause without an admission for more than two lease periods as the share
// rule grants them (max(20 ms, minShare × instances × 0.1 ms)); and at 100
// instances at most 0.5 script calls per admission (main before the share
// rule: 1.6 to 2.6 on the real fleet). Under uniform demand every instance
// asks without pause; under skewed demand a tenth do and the others ask 5
// times a second each, at random: what those leave must go to the first
// (before a fetch left short came back before the bucket's debt fell below
// the lease time, 10 instances admitted 0.79 of the bound: the one that
// asks without pause waited, and its next lease skipped the refill).
func TestLeaseSimShareRule(t *testing.T) {
	for _, demand := range []struct {
		name      string
		hot, slow float64
	}{{"uniform", 1, 0}, {"skewed", 0.1, 5}} {
		for _, n := range []int{10, 100, 1000} {
			c := simConfig{n: n, rate: 10_000, burst: 100, d: 20 * time.Millisecond, run: 2 * time.Second,
				rtt: 200 * time.Microsecond, hot: demand.hot, slow: demand.slow, seed: 1}
			period := max(c.d, time.Duration(minShare*int64(n))*100*time.Microsecond)
			res := simulate(c)
			t.Logf("%s, %d instances: admitted %.4f of the bound, the longest without an admission %.2f periods, %.3f calls per admission",
				demand.name, n, float64(res.admitted)/float64(res.bound), float64(res.starved)/float64(period), float64(res.calls)/float64(res.admitted))
			require.LessOrEqual(t, res.admitted, res.bound, "%s, %d instances: admitted", demand.name, n)
			require.GreaterOrEqual(t, float64(res.admitted), 0.9*float64(res.bound), "%s, %d instances: admitted", demand.name, n)
			require.LessOrEqual(t, res.starved, 2*period, "%s, %d instances: the longest without an admission (period %v)", demand.name, n, period)
			if n == 100 {
				require.LessOrEqual(t, float64(res.calls), 0.5*float64(res.admitted), "%s, %d instances: script calls", demand.name, n)
			}
		}
	}
}
