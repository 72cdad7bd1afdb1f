package grpclimit

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/keylimit/keylimit/internal/ratefields"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Bounds of a Client's pauses. Keys are the client's own (targets, or
// methods), not the server's, so few are expected; the cap is for a
// Client.Key that keys by something unbounded.
const (
	// sweepAbove is the least number of pauses at which adding one first
	// deletes those that have ended; after a sweep, the next comes when the
	// pauses have doubled, so that sweeping costs O(1) an add, amortized.
	sweepAbove = 64
	// maxPauses is the most pauses kept: past it, adding one drops the one
	// that ends first.
	maxPauses = 4096
	// maxDetails is how many details of a status are looked at for a
	// RetryInfo: a server's answer is read in bounded time.
	maxDetails = 16
)

// pause records that the server asked for no call under key until until.
func (c *Client) pause(key string, until, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = make(map[string]time.Time)
	}
	if cur, ok := c.paused[key]; ok {
		if until.After(cur) { // an answer that arrived late does not shorten a pause
			c.paused[key] = until
		}
		return
	}
	if n := len(c.paused); n >= max(c.sweepAt, sweepAbove) || n >= maxPauses {
		for k, u := range c.paused {
			if !u.After(now) {
				delete(c.paused, k)
			}
		}
		c.sweepAt = 2 * len(c.paused)
	}
	if len(c.paused) >= maxPauses {
		first, firstUntil := "", time.Time{}
		for k, u := range c.paused {
			if first == "" || u.Before(firstUntil) {
				first, firstUntil = k, u
			}
		}
		delete(c.paused, first)
	}
	c.paused[key] = until
}

// pausedUntil returns the end of the server's pause on key, or the zero Time
// if there is none at now.
func (c *Client) pausedUntil(key string, now time.Time) time.Time {
	c.mu.RLock()
	until, ok := c.paused[key]
	c.mu.RUnlock()
	if !ok {
		return time.Time{}
	}
	if until.After(now) {
		return until
	}
	c.mu.Lock()
	if u, ok := c.paused[key]; ok && !u.After(now) {
		delete(c.paused, key)
	}
	c.mu.Unlock()
	return time.Time{}
}

// RetryDelay returns the delay of the google.rpc.RetryInfo detail of err's
// gRPC status (the largest, if it has several), and whether it has a valid
// one: not negative, nanoseconds within a second. A delay beyond what a
// time.Duration holds (292 years) is returned as the largest Duration.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return 0, false
	}
	return retryInfoDelay(st)
}

// serverDelay returns how long the server asked the client to wait after a
// call that ended with st and trailer: the larger of its RetryInfo delay and
// its grpc-retry-pushback-ms, cut to maxPause; false if it asked for none.
func serverDelay(st *status.Status, trailer metadata.MD, maxPause time.Duration) (time.Duration, bool) {
	d, ok := retryInfoDelay(st)
	if p, pok := pushbackDelay(trailer[pushbackKey]); pok && (!ok || p > d) {
		d, ok = p, true
	}
	return min(d, maxPause), ok
}

// retryInfoDelay returns the largest valid RetryInfo delay among the first
// maxDetails details of st.
func retryInfoDelay(st *status.Status) (time.Duration, bool) {
	var best time.Duration
	found := false
	for i, a := range st.Proto().GetDetails() {
		if i == maxDetails {
			break
		}
		// An Any names its type by the last segment of its URL.
		url := a.GetTypeUrl()
		if url[strings.LastIndexByte(url, '/')+1:] != retryInfoName {
			continue
		}
		var ri errdetails.RetryInfo
		if proto.Unmarshal(a.GetValue(), &ri) != nil {
			continue
		}
		if d, ok := protoDelay(ri.GetRetryDelay()); ok && (!found || d > best) {
			best, found = d, true
		}
	}
	return best, found
}

// retryInfoName is the full name of the google.rpc.RetryInfo message.
var retryInfoName = string((&errdetails.RetryInfo{}).ProtoReflect().Descriptor().FullName())

// protoDelay converts a protobuf Duration to a delay: false if it is
// missing, negative or not well-formed; the largest Duration if it is
// longer.
func protoDelay(d *durationpb.Duration) (time.Duration, bool) {
	if d == nil {
		return 0, false
	}
	s, n := d.GetSeconds(), d.GetNanos()
	if s < 0 || n < 0 || n >= 1e9 {
		return 0, false
	}
	if s > (math.MaxInt64-int64(n))/int64(time.Second) {
		return math.MaxInt64, true
	}
	return time.Duration(s)*time.Second + time.Duration(n), true
}

// pushbackDelay reads the values of grpc-retry-pushback-ms as gRPC's retry
// does (gRFC A6): one value, a number of milliseconds that is not negative.
// Several values, or a negative or malformed one, ask for no delay. A
// number beyond what a time.Duration holds is the largest Duration.
func pushbackDelay(vals []string) (time.Duration, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	v := vals[0]
	if v == "" || len(v) > 32 {
		return 0, false
	}
	// Digits only (ParseInt reports "out of range" before it meets a bad
	// character, so "99999999999999999999A" would read as a long delay).
	for i := 0; i < len(v); i++ {
		if (v[i] < '0' || v[i] > '9') && !(i == 0 && (v[i] == '-' || v[i] == '+')) {
			return 0, false
		}
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && v[0] != '-' {
			return math.MaxInt64, true
		}
		return 0, false
	}
	if ms < 0 {
		return 0, false
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// observeAdmitted reads, with FollowRateLimit, the ratelimit header
// metadata of a unary call that succeeded, and pauses key until the
// largest t of its policies with r=0, at most MaxPause. A malformed value
// is ignored whole, as httplimit.Transport reads it; so are values longer
// than maxRateLimitMD, whose work is not spent.
func (c *Client) observeAdmitted(key string, err error, header metadata.MD) {
	vals := header[rateLimitKey]
	if err != nil || !c.FollowRateLimit || len(vals) == 0 {
		return
	}
	size := 0
	for _, v := range vals {
		size += len(v) + 1
	}
	if size > maxRateLimitMD+1 {
		return
	}
	// Several values are one List, as several HTTP field lines are.
	secs, _ := ratefields.ReadRateLimit(strings.Join(vals, ","))
	if secs <= 0 {
		return
	}
	maxPause := c.MaxPause
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	d := maxPause
	if secs < int64(maxPause/time.Second) {
		d = time.Duration(secs) * time.Second
	}
	now := c.clock().Now()
	c.pause(key, now.Add(d), now)
}

// rateLimitKey is the metadata key of the RateLimit field; maxRateLimitMD
// the most bytes of its values the Client reads (a real one is a few dozen
// bytes a policy), so that the work an answer makes is bounded.
const (
	rateLimitKey   = "ratelimit"
	maxRateLimitMD = 8 << 10
)
