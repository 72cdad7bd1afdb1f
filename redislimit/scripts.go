package redislimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// The Lua scripts. The full script is lua/prelude.lua (the arguments, the
// time, the reply), each algorithm's file, and lua/decide.lua (one decision
// for one key under one or several limiters), all commented: it takes,
// peeks, refunds and leases. The plain decision, a take under one bucket,
// fixed window or sliding log whose state counts in the key's limit, has a
// script of its own for each (lua/take_bucket.lua, lua/take_fixed.lua,
// lua/take_sliding.lua) that does only that, at a fraction of the full
// script's server time; it replies "full" to hand the rest (a state written
// under another limit) to the full script. Each decision is one call of a script: EVALSHA, and EVAL
// once if the server does not know the script yet (a new or restarted
// server, a replica promoted), which is what redis.Script.Run does.
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/bucket.lua
	bucketLua string
	//go:embed lua/fixed.lua
	fixedLua string
	//go:embed lua/sliding.lua
	slidingLua string
	//go:embed lua/calendar.lua
	calendarLua string
	//go:embed lua/decide.lua
	decideLua string
	//go:embed lua/take_bucket.lua
	takeBucketLua string
	//go:embed lua/take_fixed.lua
	takeFixedLua string
	//go:embed lua/take_sliding.lua
	takeSlidingLua string
	//go:embed lua/take_batch.lua
	takeBatchLua string

	script            = redis.NewScript(constantsLua + preludeLua + bucketLua + fixedLua + slidingLua + calendarLua + decideLua)
	takeBucketScript  = redis.NewScript(takeBucketLua)
	takeFixedScript   = redis.NewScript(takeFixedLua)
	takeSlidingScript = redis.NewScript(slidingConstantsLua + takeSlidingLua)

	// batchOf is the script that makes several plain takes of a plain
	// script in one call (lua/take_batch.lua), for the coalescer.
	batchOf = map[*redis.Script]*redis.Script{
		takeBucketScript:  batchScript(takeBucketLua),
		takeFixedScript:   batchScript(takeFixedLua),
		takeSlidingScript: batchScript(slidingConstantsLua + takeSlidingLua),
	}
)

// batchScript is lua/take_batch.lua around the plain script take: what
// take runs before its line "-- Per key." once a call, what follows once
// for each key.
func batchScript(take string) *redis.Script {
	before, perKey, found := strings.Cut(take, perKeyLine)
	if !found {
		panic("redislimit: a plain script without its line " + perKeyLine)
	}
	batch := strings.Replace(takeBatchLua, "--{before}\n", before, 1)
	return redis.NewScript(strings.Replace(batch, "--{per key}\n", perKeyLine+perKey, 1))
}

// perKeyLine begins the part of a plain script a batch runs for each key.
const perKeyLine = "\n-- Per key."

// constantsLua begins the full script with the Go constants its lease
// arithmetic shares with lease.go, and the sliding log's with take.go, so
// that the two cannot drift apart.
var constantsLua = fmt.Sprintf("local leaseShare, maxLeaseShare, minShare, maxPace = %d, %d, %d, %d\n",
	leaseShare, maxLeaseShare, minShare, maxPace) + slidingConstantsLua

// slidingConstantsLua: the most entries of a sliding log kept as a string
// (lua/sliding.lua), which the full script and the plain take share.
var slidingConstantsLua = fmt.Sprintf("local short = %d\n", slidingShort)

// needsFull is a plain script's reply when the decision is the full
// script's; noCount a fixed window's plain take's on a server that keeps no
// count (see store.noCount).
const (
	needsFull = "full"
	noCount   = "no count"
)

// The modes the script takes as ARGV[1], and the mark of a call that is no
// refund, boxed once so that passing them to the client does not allocate.
var (
	modeTake   any = "take"
	modePeek   any = "peek"
	modeRefund any = "refund"
	modeLease  any = "lease"
	noMark     any = "0"
	// carryMark is a take's or a peek's in place of the mark, while a
	// fixed window's store carries counts (store.carrying).
	carryMark any = "carry"
)

// scriptClock is where the script takes the time from: nil, Redis's TIME
// (always, outside this package's tests); otherwise c's time, sent with
// each call, so that the tests can step it (see export_test.go).
type scriptClock struct {
	c clock.Clock
	// calendar, if not nil, is the time a calendar window's parameters are
	// made at instead of c's: the tests of a caller whose clock is not
	// Redis's.
	calendar clock.Clock
}

// sameScriptClock reports whether a and b take the time from the same
// place, as the limiters of one call must.
func sameScriptClock(a, b *scriptClock) bool {
	return a == b || a != nil && b != nil && a.c == b.c
}

// store is the bottom of a limiter's decision path: the script call, and
// the DEL of Reset. It is one limiter's Redis: the client, the prefix of
// the keys it writes, the bound on a call's wait, and where the script
// takes the time from. It knows nothing of failures: the guard above it
// answers for them.
type store struct {
	client  redis.UniversalClient
	prefix  string        // of every key written: prefix{key} (see redisKey)
	timeout time.Duration // bound on one call's wait for Redis
	// clock is nil outside the package's tests: the scripts decide on
	// Redis server time.
	clock *scriptClock
	// takes makes the plain takes' calls, in pipelines when many are under
	// way (see coalescer).
	takes coalescer
	// instance names this instance to a bucket's paced leases (the fleet
	// on a key: lua/bucket.lua's fleet): random, so that instances differ;
	// boxed once, set before the first call.
	instance any
	// serverOffset is Redis's clock less the process's monotonic clock, in
	// µs, as a fixed window's plain take last read it (serverNow); 0 until
	// then.
	serverOffset atomic.Int64
	// noCount is set once the server has said it keeps no fixed window's
	// count (lua/take_fixed.lua's "no count": miniredis, Redis before
	// 7.0): a fixed window's takes are the full script's from then on.
	noCount atomic.Bool
	// local is the limiter's clock; until carryUntil on it (ns, 0: never)
	// the full script carries a fixed window's count that ends in a later
	// window than now's into now's: the limit changed, and the count may
	// be of a window of a longer period (lua/fixed.lua), not of a clock
	// stepped back. longest is the longest period of a fixed window of
	// this store's limits so far, ns.
	local      *localClock
	carryUntil atomic.Int64
	longest    atomic.Int64
}

// limitChanged notes that the limiter's limits changed: until every count
// of a window of the old limits has ended, the full script carries those
// of windows that end later than now's (see carryUntil).
func (s *store) limitChanged() {
	if longest := s.longest.Load(); longest > 0 && s.local != nil {
		s.carryUntil.Store(s.local.now() + longest + int64(s.timeout) + int64(time.Second))
	}
}

// carrying reports whether the full script carries counts (carryUntil).
func (s *store) carrying() bool {
	until := s.carryUntil.Load()
	return until != 0 && s.local != nil && s.local.now() < until
}

// processStart is the monotonic origin of store.serverOffset.
var processStart = time.Now()

// sawServerTime notes t, Redis's clock in µs since the epoch, as a reply
// just received gave it: it was read at most a round trip ago.
func (s *store) sawServerTime(t int64) {
	if s.clock == nil {
		s.serverOffset.Store(t - time.Since(processStart).Microseconds())
	}
}

// serverNow is Redis's clock in µs since the epoch, as this process last
// saw it (sawServerTime) and has counted on its monotonic clock since: a
// round trip early at most, less the drift between the clocks; the
// system's clock until Redis's is seen; the tests' clock under one.
func (s *store) serverNow() int64 {
	switch {
	case s.clock != nil:
		return s.clock.c.Now().UnixMicro()
	case s.serverOffset.Load() != 0:
		return time.Since(processStart).Microseconds() + s.serverOffset.Load()
	}
	return time.Now().UnixMicro()
}

// redisKey is the Redis key of key's state: prefix{key}, the key between
// braces as the hash tag, so that on Redis Cluster the states of one key
// under several limiters share a slot, and one script call can decide for
// them all (see join). A key the tag cannot hold, empty or with a '}' (which
// would end the tag early, letting the key empty or choose it), is
// prefix{h}:key instead, h the key's tagHash in 16 hex digits: a tag of the
// whole key, the same on every instance, and a name no other key has (a
// name of the first form ends at its first '}').
func (s *store) redisKey(key string) string {
	if key != "" && strings.IndexByte(key, '}') < 0 {
		return s.prefix + "{" + key + "}"
	}
	var tag [16]byte
	h := tagHash(key)
	for i := range tag {
		tag[i] = "0123456789abcdef"[h>>(60-4*i)&0xf]
	}
	return s.prefix + "{" + string(tag[:]) + "}:" + key
}

// tagHash is the 64-bit FNV-1a hash of key: fixed by its specification, so
// that every instance, of every version, tags a key alike.
func tagHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	return h
}

// del deletes keys (states of this store's limiter or of those joined
// with it) in one DEL.
func (s *store) del(ctx context.Context, keys ...string) error {
	c, tctx, cancel := startCall(ctx, s.timeout)
	err := s.client.Del(tctx, keys...).Err()
	c.end(cancel)
	return err
}

// algorithm is what distinguishes a token bucket from the windows: the
// script's name for it and how a limit becomes its parameters.
type algorithm struct {
	name string        // the script's name of the algorithm; in the default prefix too
	arg  any           // name, boxed once so that passing it to the client does not allocate
	unit time.Duration // of the times the script returns: ns or µs
	// canLease: the script can lease for it (WithLeases); refills: its
	// events come back one interval at a time (a bucket), not all at a
	// window's end.
	canLease, refills bool
	// tellsRefill: its reply has a sixth integer, the time until more
	// quota is available (Result.RefillAfter), which the five do not tell
	// (a sliding log's oldest entry in the window). For the others,
	// keyLimit.refillAfter derives it from the five.
	tellsRefill bool
	// take is the script of its plain decision (see script), nil if it has
	// none: every call is the full script's.
	take *redis.Script
	// takeArgs makes the ARGV of take for n events under k (the tests'
	// time goes after them), life the ms a key's expiry adds under the
	// tests' clock (prelude.lua's ttl), 0 without it: a script that leaves
	// out an n of 1 keeps it under the tests' clock, whose time follows.
	takeArgs func(k *keyLimit, n int, life int64) [4]any
	// fresh, if not nil, reads a reply of take that is the state it wrote
	// for a take of n under k that found none (it begins with '@'), or
	// a fixed window's decision on a count of the window that ends at end
	// (it begins with '=', or '!' for a refusal: take.go's fixedFresh):
	// the Result, and the admission's mark; false if the reply is
	// malformed.
	// (Results by value: a pointer passed to a func value escapes, and
	// would cost Allow an allocation.)
	fresh func(k *keyLimit, n int, reply string, end int64) (keylimit.Result, int64, bool)
	// params checks l and returns the script's two parameters for it (boxed
	// int64s), the quota (Result.Limit: the most events admitted at once),
	// or an error that says why the algorithm cannot take l.
	params func(l keylimit.Limit) (p1, p2 int64, quota int, err error)
	// forCalendar, if not nil, is the algorithm a limit per period of the
	// calendar counts with instead (a FixedWindow's: calendar.go).
	forCalendar *algorithm
	// timed, if not nil, makes the timedArgs of l, whose parameters depend
	// on the time of each call, and the RetryAfter of a refusal under
	// FailClosed.
	timed func(l keylimit.Limit) (timedArgs, time.Duration)
}

// timedArgs makes the parameters of a limit that depend on the time of the
// call (a calendar window's).
type timedArgs interface {
	// params returns the parameters at t (Unix ns; 0: now on sc, the
	// tests' script clock, or the system's if nil), and t.
	params(t int64, sc *scriptClock) (p1, p2 any, at int64)
	// again reads from the script's error the time (Unix ns, on Redis's
	// clock) the call must be made again at, with that time's parameters.
	again(err error) (int64, bool)
}

// under returns the algorithm l counts with under alg.
func (alg *algorithm) under(l keylimit.Limit) *algorithm {
	if l.Calendar != 0 && alg.forCalendar != nil {
		return alg.forCalendar
	}
	return alg
}

// keyLimit is one limit of one limiter as a decision needs it: the
// script's parameters, boxed once so that a call does not allocate to pass
// them, and what the Results and the failure policy say. Every key under
// the same limit shares one (internal/perkey keeps them, one generation of
// limits at a time).
type keyLimit struct {
	owner          *store // the limiter's: its keys' prefix; an Admission's By tells its limiter by it
	alg            *algorithm
	limit          keylimit.Limit
	param1, param2 any
	quota          int
	// retryClosed is the RetryAfter of a refusal under FailClosed: the
	// limit's interval.
	retryClosed time.Duration
	// err is why the limit is invalid (one SetKeyLimit's function gave): the key's
	// requests are refused.
	err error
	// step is the interval in ns of an algorithm that refills (a bucket's
	// TAT moves by it per event), and span its quota's worth (a bucket's
	// Burst × Interval); 0 for a window.
	step, span int64
	// timed makes the parameters of a limit that depend on the time for
	// each call (a calendar window's, see calendar.go); nil for the others.
	timed timedArgs
	// take1 is the ARGV of a plain take of one event (alg.takeArgs),
	// boxed once.
	take1 [4]any
	// expect is the window a fixed window's plain take expects, the last
	// one made (expectedWindow).
	expect atomic.Pointer[expectedEnd]
	// plain: a take under k alone has a plain script (alg.take): not a
	// fixed window's whose period is not a whole number of ms, which a
	// count's expiry cannot end (lua/take_fixed.lua).
	plain bool
}

// newKeyLimit returns the keyLimit of l for the limiter of s and alg, with
// err set if the algorithm cannot take l.
func newKeyLimit(s *store, alg *algorithm, l keylimit.Limit) *keyLimit {
	alg = alg.under(l) // a key's own limit per period of the calendar
	k := &keyLimit{owner: s, alg: alg, limit: l, retryClosed: l.WithBurst(1).FillTime()}
	if alg.timed != nil {
		k.timed, k.retryClosed = alg.timed(l)
	}
	p1, p2, quota, err := alg.params(l)
	k.param1, k.param2, k.quota, k.err = p1, p2, quota, err
	if alg.refills {
		k.step = int64(l.WithBurst(1).FillTime())
		k.span = k.step * int64(quota)
	}
	k.plain = alg.take != nil && err == nil && (alg != &fixedAlgorithm || l.Period%time.Millisecond == 0)
	if alg == &fixedAlgorithm {
		for p := s.longest.Load(); int64(l.Period) > p && !s.longest.CompareAndSwap(p, int64(l.Period)); p = s.longest.Load() {
		}
	}
	if k.plain {
		k.take1 = alg.takeArgs(k, 1, 0)
	}
	return k
}

// plainArgs returns the ARGV of a plain take of n under k, and for a fixed
// window the end (µs since the epoch) of the window the take expects to be
// in; tests: the time is the tests' (see scriptClock).
func (k *keyLimit) plainArgs(n int, tests bool) ([4]any, int64) {
	args := k.take1
	if n != 1 || tests {
		var life int64
		if tests {
			life = 3_600_000
		}
		args = k.alg.takeArgs(k, n, life)
	}
	if k.alg != &fixedAlgorithm {
		return args, 0
	}
	var end int64
	args[2], end = k.expectedWindow(tests)
	return args, end
}

// expectedWindow returns the expiry (ms since the epoch, boxed text) of
// the state of the window that holds Redis's time as this process reckons
// it (store.serverNow), a ms before the window ends, and that end in µs: a
// fixed window's plain take adds to a count only if its expiry is that
// one (lua/take_fixed.lua). Made once a window, outside the tests.
func (k *keyLimit) expectedWindow(tests bool) (any, int64) {
	now := k.owner.serverNow()
	if e := k.expect.Load(); e != nil && !tests && now >= e.end-e.period && now < e.end {
		return e.text, e.end
	}
	period := int64(k.limit.Period / time.Microsecond)
	end := (windowIndex(now, period) + 1) * period
	e := &expectedEnd{end: end, period: period, text: strconv.FormatInt(end/1000-1, 10)}
	if !tests {
		k.expect.Store(e)
	}
	return e.text, e.end
}

// expectedEnd is a window a fixed window's plain take expects (see
// keyLimit.expectedWindow): its end and period in µs, and its state's
// expiry, boxed.
type expectedEnd struct {
	end, period int64
	text        any
}

// Refuse and Supersede make a keyLimit a perkey.Config. A Redis limiter
// keeps no key's state in process, and so no key holds a keyLimit that
// must notice a new generation: each decision resolves its key anew, and
// Supersede has nothing to do.
func (k *keyLimit) Refuse(err error) { k.err = err }
func (k *keyLimit) Supersede()       {}

// never answers a request of n events that can never pass under k without
// a round trip: n < 0, n above the quota, or an invalid limit from
// SetKeyLimit's function.
func (k *keyLimit) never(n int) (keylimit.Result, bool) {
	if k.err != nil {
		return keylimit.Result{Limit: k.quota, RetryAfter: keylimit.InfDuration, Err: k.err}, true
	}
	if n < 0 || n > k.quota {
		return keylimit.Result{Limit: k.quota, RetryAfter: keylimit.InfDuration}, true
	}
	return keylimit.Result{}, false
}

// decision is one script call in the making: the key, and for each limiter
// of the call its share (the limit the key is under) and, for a refund, its
// admission's mark. (The mode is store.run's argument: an interface in the
// struct would make the compiler move a decision's parts to the heap.)
type decision struct {
	key   string
	n     int
	parts []*keyLimit
	marks []int64 // for modeRefund and modeLease; nil otherwise
	// leasing is modeLease's: what to lease and what to give back, and
	// what Redis granted.
	leasing leaseArgs
}

// leaseArgs are the five arguments of modeLease after the limiter's (see
// lua/prelude.lua), and what it granted. (No interface here: one would make
// the compiler move every decision's parts to the heap.)
type leaseArgs struct {
	want int   // the most events to lease beyond n
	hold int64 // the lease time in ns
	give int64 // the events an ended lease gives back, from marks[0]
	// period is the instance's lease time (WithLeases), ns; a bucket's
	// lease with period > 0 is paced, under the share rule.
	period  int64
	granted int64 // the reply's sixth integer: the events leased beyond n
	pace    int64 // the reply's seventh: ns before the instance asks again (0: none)
	life    int64 // the reply's eighth: the lease's time, ns (0: hold)
}

// run makes the script call d in mode, with a deadline s.timeout from now
// within ctx, and writes what each limiter answered into res and the marks
// of its admissions into marks (both with one element per part). The
// Results' Limit is each part's quota; their times are Durations.
func (s *store) run(ctx context.Context, mode any, d *decision, res []keylimit.Result, marks []int64) error {
	if mode == modeTake && len(d.parts) == 1 && d.parts[0].plain && !(d.parts[0].alg == &fixedAlgorithm && s.noCount.Load()) {
		if done, err := s.runTake(ctx, d, res, marks); done || err != nil {
			return err
		}
	}
	c, tctx, cancel := startCall(ctx, s.timeout)
	// The parameters of a limit that depend on the time are made at at
	// (Unix ns; 0: now), and a call is made again at most twice at the
	// time the script names (a calendar window's, calendar.go).
	var at int64
	var timed timedArgs
	tries := 0
again:
	keys, args := c.keys[:0], c.args[:0]
	if len(d.parts) > inlineParts {
		keys = make([]string, 0, len(d.parts))
		args = make([]any, 0, 4+4*len(d.parts))
	}
	args = append(args, mode, d.n)
	for i, p := range d.parts {
		keys = append(keys, p.owner.redisKey(d.key))
		mark := noMark
		if mode == modeRefund || mode == modeLease {
			mark = d.marks[i]
		} else if p.alg == &fixedAlgorithm && p.owner.carrying() {
			mark = carryMark
		}
		p1, p2 := p.param1, p.param2
		if p.timed != nil {
			timed = p.timed
			p1, p2, at = timed.params(at, s.clock)
		}
		args = append(args, p.alg.arg, p1, p2, mark)
	}
	if mode == modeLease {
		args = append(args, d.leasing.want, d.leasing.hold, d.leasing.give, d.leasing.period, s.instance)
		if d.leasing.period > 0 && d.parts[0].step > 0 {
			keys = append(keys, keys[0]+fleetSuffix)
		}
	}
	if s.clock != nil {
		now := s.clock.c.Now()
		args = append(args, now.Unix(), now.Nanosecond())
	}
	reply, err := script.Run(tctx, s.client, keys, args...).Text()
	if timed != nil && tries < 2 {
		if t, ok := timed.again(err); ok {
			at, tries = t, tries+1
			goto again
		}
	}
	c.end(cancel)
	if err != nil {
		return scriptFailure(err)
	}
	if mode == modeLease {
		var ok bool
		if d.leasing.granted, d.leasing.pace, d.leasing.life, ok = parseLeaseReply(reply, d.parts, res, marks, d.leasing.want, d.leasing.period); !ok {
			return fmt.Errorf("redislimit: the script replied %q to a lease of up to %d, want eight integers", reply, d.leasing.want)
		}
		return nil
	}
	if !parseReply(reply, d.parts, res, marks) {
		return fmt.Errorf("redislimit: the script replied %q, want five integers for each of %d limiters", reply, len(d.parts))
	}
	return nil
}

// runTake is run for a take under one limiter whose algorithm has a plain
// script: it calls that, and reports whether the script decided (false: it
// replied needsFull, and the full script must).
func (s *store) runTake(ctx context.Context, d *decision, res []keylimit.Result, marks []int64) (bool, error) {
	p := d.parts[0]
	a := takeArgs{script: p.alg.take, key: p.owner.redisKey(d.key)}
	a.args, a.end = p.plainArgs(d.n, s.clock != nil)
	if s.clock != nil {
		a.fixedClock, a.now = true, s.clock.c.Now()
	}
	reply, err := s.takes.run(ctx, &a)
	if err != nil {
		if wrongType(err) || p.alg == &fixedAlgorithm && notCount(err) {
			return false, nil // a state of another shape (lua/take_fixed.lua)
		}
		return true, scriptFailure(err)
	}
	switch reply {
	case needsFull:
		return false, nil
	case noCount:
		s.noCount.Store(true)
		return false, nil
	}
	if reply != "" && (reply[0] == '@' || reply[0] == '=' || reply[0] == '!') && p.alg.fresh != nil {
		var ok bool
		if res[0], marks[0], ok = p.alg.fresh(p, d.n, reply, a.end); !ok {
			return true, fmt.Errorf("redislimit: the script replied %q, want a state, a count or five integers", reply)
		}
		return true, nil
	}
	if !parseReply(reply, d.parts, res, marks) {
		return true, fmt.Errorf("redislimit: the script replied %q, want five integers", reply)
	}
	return true, nil
}

// notCount reports whether err is Redis's reply that INCRBY met a value
// that is not an integer: a fixed window's state of another shape.
func notCount(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(reply.Error(), "value is not an integer")
}

// wrongType reports whether err is Redis's reply that a command met a key
// of another type.
func wrongType(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE")
}

// parseLeaseReply reads the script's reply to a lease of up to want events
// beyond n, for an instance whose lease time is period: parseReply's five
// integers for the one limiter, then the events leased, the pace and the
// lease's time, which it returns; it reports whether the reply was well
// formed, with 0 <= leased <= want (a reply cannot lease more than was
// asked), 0 <= pace <= maxPace × period (0 if period is 0) and 0 <= life
// <= the limit's span (0: the lease time asked); a refusal leases nothing.
func parseLeaseReply(s string, parts []*keyLimit, res []keylimit.Result, marks []int64, want int, period int64) (leased, pace, life int64, ok bool) {
	var v [3]int64
	for j := 2; j >= 0; j-- {
		i := strings.LastIndexByte(s, ' ')
		if i < 0 {
			return 0, 0, 0, false
		}
		x, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil || x < 0 {
			return 0, 0, 0, false
		}
		v[j], s = x, s[:i]
	}
	leased, pace, life = v[0], v[1], v[2]
	if leased > int64(want) || pace > paceLimit(period) || life > parts[0].span || !parseReply(s, parts, res, marks) {
		return 0, 0, 0, false
	}
	if !res[0].Allowed && leased != 0 {
		return 0, 0, 0, false
	}
	return leased, pace, life, true
}

// paceLimit is the longest pace a reply may give an instance whose lease
// time is period: maxPace periods, within maxSpan.
func paceLimit(period int64) int64 { return min(max(period, 0), maxSpan/maxPace) * maxPace }

// fleetSuffix names, beside a bucket's state prefix{key}, the instances
// that leased the key lately (lua/bucket.lua's fleet), in its hash slot: no
// key's state has this name (see redisKey).
const fleetSuffix = ":lf"

// parseReply reads the script's reply, five integers per limiter, "allowed
// remaining retry-after reset-after mark", and a sixth, refill-after, for
// an algorithm that tellsRefill, into res and marks, and reports whether it
// was well formed. The times are converted from each part's unit,
// saturating; mark is an admission's (0 otherwise).
func parseReply(s string, parts []*keyLimit, res []keylimit.Result, marks []int64) bool {
	for i, p := range parts {
		var v [6]int64
		fields := 5
		if p.alg.tellsRefill {
			fields = 6
		}
		for j := range fields {
			field, rest, _ := strings.Cut(s, " ")
			n, err := strconv.ParseInt(field, 10, 64)
			if err != nil {
				return false
			}
			v[j], s = n, rest
		}
		res[i] = keylimit.Result{
			Allowed: v[0] == 1,
			Limit:   p.quota,
			// A count can exceed the events of a limit lowered since;
			// Remaining never goes below 0.
			Remaining:  int(max(min(v[1], int64(p.quota)), 0)),
			RetryAfter: duration(v[2], p.alg.unit),
			ResetAfter: duration(v[3], p.alg.unit),
		}
		res[i].RefillAfter = p.refillAfter(res[i], duration(v[5], p.alg.unit))
		marks[i] = v[4]
	}
	return s == ""
}

// refillAfter is the RefillAfter of r, a Result the script gave under k,
// told is the script's own, if its algorithm tellsRefill: 0 for a whole
// quota; a bucket's next token, from its TAT (ResetAfter ahead), as
// keylimit.TokenBucket computes it; a fixed window's end, which
// ResetAfter is when it holds a count.
func (k *keyLimit) refillAfter(r keylimit.Result, told time.Duration) time.Duration {
	switch {
	case r.Remaining >= k.quota || r.ResetAfter <= 0:
		return 0
	case k.alg.tellsRefill:
		return told
	case k.step > 0:
		ahead := int64(r.ResetAfter)
		tokens := max(k.span-ahead, 0) / k.step
		return time.Duration(ahead - k.span + (tokens+1)*k.step)
	default:
		return r.ResetAfter
	}
}

// duration converts v of unit to a Duration, saturating below InfDuration
// (which means "never"); negative values, which the script never returns
// for a time, become 0.
func duration(v int64, unit time.Duration) time.Duration {
	if v <= 0 {
		return 0
	}
	if v >= int64(keylimit.InfDuration-1)/int64(unit) {
		return keylimit.InfDuration - 1
	}
	return time.Duration(v) * unit
}
