package redislimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// The Lua script: lua/prelude.lua (the arguments, the time, the reply),
// each algorithm's file, and lua/decide.lua (one decision for one key under
// one or several limiters), all commented. Each decision is one call of it:
// EVALSHA, and EVAL once if the server does not know the script yet (a new
// or restarted server, a replica promoted), which is what redis.Script.Run
// does.
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/bucket.lua
	bucketLua string
	//go:embed lua/fixed.lua
	fixedLua string
	//go:embed lua/sliding.lua
	slidingLua string
	//go:embed lua/decide.lua
	decideLua string

	script = redis.NewScript(preludeLua + bucketLua + fixedLua + slidingLua + decideLua)
)

// The modes the script takes as ARGV[1], and the mark of a call that is no
// refund, boxed once so that passing them to the client does not allocate.
var (
	modeTake   any = "take"
	modePeek   any = "peek"
	modeRefund any = "refund"
	noMark     any = "0"
)

// scriptClock is where the script takes the time from: nil, Redis's TIME
// (always, outside this package's tests); otherwise c's time, sent with
// each call, so that the tests can step it (see export_test.go).
type scriptClock struct{ c clock.Clock }

// withScriptClock makes the scripts decide on c's time instead of Redis
// server time. Only the package's tests set it: Redis's own clock cannot be
// moved, and the behaviour suite steps a clock back and forth.
func withScriptClock(c clock.Clock) Option {
	return optionFunc(func(o *options) { o.scriptClock = &scriptClock{c} })
}

// decision is one script call in the making: the key, and for each limiter
// of the call its share (the limit the key is under) and, for a refund, its
// admission's mark. (The mode is run's argument: an interface in the
// struct would make the compiler move a decision's parts to the heap.)
type decision struct {
	key   string
	n     int
	parts []*keyLimit
	marks []int64 // for modeRefund; nil otherwise
}

// run makes the script call for d in mode through client, with a deadline timeout
// from now within ctx, and writes what each limiter answered into res and
// the marks of its admissions into marks (both with one element per part).
// The Results' Limit is each part's quota; their times are Durations.
func (d *decision) run(ctx context.Context, mode any, client redis.UniversalClient, timeout time.Duration, clk *scriptClock,
	res []keylimit.Result, marks []int64) error {
	c, tctx, cancel := startCall(ctx, timeout)
	keys, args := c.keys[:0], c.args[:0]
	if len(d.parts) > inlineParts {
		keys = make([]string, 0, len(d.parts))
		args = make([]any, 0, 4+4*len(d.parts))
	}
	args = append(args, mode, d.n)
	for i, p := range d.parts {
		keys = append(keys, p.owner.redisKey(d.key))
		mark := noMark
		if mode == modeRefund {
			mark = d.marks[i]
		}
		args = append(args, p.alg.arg, p.param1, p.param2, mark)
	}
	if clk != nil {
		now := clk.c.Now()
		args = append(args, now.Unix(), now.Nanosecond())
	}
	reply, err := script.Run(tctx, client, keys, args...).Text()
	c.end(cancel)
	if err != nil {
		return err
	}
	if !parseReply(reply, d.parts, res, marks) {
		return fmt.Errorf("redislimit: the script replied %q, want five integers for each of %d limiters", reply, len(d.parts))
	}
	return nil
}

// parseReply reads the script's reply, five integers per limiter, "allowed
// remaining retry-after reset-after mark", into res and marks, and reports
// whether it was well formed. The times are converted from each part's
// unit, saturating; mark is an admission's (0 otherwise).
func parseReply(s string, parts []*keyLimit, res []keylimit.Result, marks []int64) bool {
	for i, p := range parts {
		var v [5]int64
		for j := range v {
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
		marks[i] = v[4]
	}
	return s == ""
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
