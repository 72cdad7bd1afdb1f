// Package throttle is the client-side adaptive throttling that
// httplimit.Transport and grpclimit.Client share (Google's SRE book,
// "Handling Overload"): per key, a client counts its recent requests and
// the partner's accepts, and rejects a request locally, before sending it,
// with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// A request rejected locally counts in requests too, so a client facing a
// partner that fails everything sends about one request a Window, and comes
// back as accepts return. A request sent counts when its outcome comes, so
// that requests in flight, however long they take, never look like
// failures. The counts decay: an event weighs e^(−age/Window), so a steady
// rate counts as many as a window of Window holds.
package throttle

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// DefaultWindow is the Window of a Config whose Window is 0. After a
// partner that failed everything for longer than a window recovers, the
// throttle lets every request through again after about
// Window/(K−1) × ln(1 + rate×Window/K): 1.3 s at 100 requests a second
// with K 2 (DESIGN.md, "Adaptive throttling").
const DefaultWindow = 250 * time.Millisecond

// Bounds of the keys kept.
const (
	// sweepAbove is the least number of keys at which adding one first
	// deletes the idle ones.
	sweepAbove = 64
	// idleBelow is the decayed count of requests under which a key is
	// forgotten: its rejection probability is below 1%, and a fresh key's
	// is 0.
	idleBelow = 0.01
)

// Config is how a client throttles.
type Config struct {
	K       float64       // 0: no throttling; else at least 1
	Window  time.Duration // how recent the counts are; 0: DefaultWindow
	MaxKeys int           // the most keys counted at once, at least 1
}

// Check returns an error, in the words of field (the name of K's field,
// "httplimit: Transport.Throttle"), if the config is not valid: K must be
// 0 or a finite number of at least 1 (below 1, a partner that accepts
// everything would be refused), Window not negative.
func (c Config) Check(field string) error {
	if c.K != 0 && !(c.K >= 1 && c.K <= math.MaxFloat64) {
		return fmt.Errorf("%s is %v: it must be 0 (off) or a finite number of at least 1 (K; 2 is the usual choice)", field, c.K)
	}
	if c.Window < 0 {
		return fmt.Errorf("%sWindow is %v: it must not be negative", field, c.Window)
	}
	return nil
}

func (c Config) window() time.Duration {
	if c.Window > 0 {
		return c.Window
	}
	return DefaultWindow
}

// Outcome is how a request that was counted ended.
type Outcome int8

const (
	// Forgotten: the request was not sent after all, or its caller gave up
	// on it before the partner answered; it is not counted.
	Forgotten Outcome = iota
	// Accepted: the partner answered and did not refuse or fail.
	Accepted
	// Failed: the partner refused or failed it, or it could not be sent.
	Failed
)

// Decision is the throttle's decision on one request.
type Decision struct {
	Send bool    // the request may be sent: Record its outcome
	P    float64 // the probability it was rejected with
	// Requests and Accepts are the key's decayed counts before the
	// request.
	Requests, Accepts float64
	K                 float64
	Window            time.Duration
}

// String says why a request was rejected (or sent), for an error message.
func (d Decision) String() string {
	return fmt.Sprintf("rejected with probability %.2f = (requests %.1f − K %v × accepts %.1f) / (requests + 1), counted over %v",
		d.P, d.Requests, d.K, d.Accepts, d.Window)
}

// Counts are the requests and accepts of each key. The zero value is ready
// to use; it is safe for concurrent use.
type Counts struct {
	mu   sync.Mutex // protects everything below
	keys map[string]state
	// sweepAt is twice the keys the last sweep kept: the next sweep comes
	// when there are more than that (or sweepAbove), or the cap.
	sweepAt int
	// dropped counts the keys forgotten before they were idle, because
	// MaxKeys were counted; visited the keys sweeps looked at. For tests.
	dropped, visited uint64
}

// state is one key's counts, decayed to at.
type state struct {
	requests, accepts float64 // accepts ≤ requests: an accept counts its request too
	at                time.Time
}

// decay brings s to now. A clock that steps back decays nothing.
func (s *state) decay(now time.Time, window time.Duration) {
	if d := now.Sub(s.at); d > 0 {
		f := math.Exp(-float64(d) / float64(window))
		s.requests *= f
		s.accepts *= f
		s.at = now
	}
}

// Admit decides whether a request under key is sent at now: it is rejected
// if u, a random number in [0, 1), is below the probability of rejection.
// A rejected request counts at once; one sent, when Record has its outcome.
func (c *Counts) Admit(key string, now time.Time, cfg Config, u float64) Decision {
	w := cfg.window()
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.keys[key]
	if ok {
		s.decay(now, w)
	}
	d := Decision{Requests: s.requests, Accepts: s.accepts, K: cfg.K, Window: w}
	d.P = max(0, (s.requests-cfg.K*s.accepts)/(s.requests+1))
	d.Send = u >= d.P
	if ok {
		c.keys[key] = s
	}
	if !d.Send {
		c.add(key, now, cfg, 1, 0)
	}
	return d
}

// Record records the outcome o, at now, of a request under key that Admit
// sent: an accept counts a request and an accept, a failure a request, and
// Forgotten nothing.
func (c *Counts) Record(key string, o Outcome, now time.Time, cfg Config) {
	if o == Forgotten {
		return
	}
	accepts := 0.0
	if o == Accepted {
		accepts = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(key, now, cfg, 1, accepts)
}

// add adds requests and accepts to key's counts at now, making the key if
// it is new. The caller holds mu.
func (c *Counts) add(key string, now time.Time, cfg Config, requests, accepts float64) {
	w := cfg.window()
	s, ok := c.keys[key]
	if ok {
		s.decay(now, w)
	} else {
		s.at = now
	}
	s.requests += requests
	s.accepts += accepts
	if c.keys == nil {
		c.keys = make(map[string]state)
	}
	c.keys[key] = s
	if !ok && len(c.keys) > min(max(c.sweepAt, sweepAbove), cfg.MaxKeys) {
		c.sweep(now, w, max(cfg.MaxKeys, 1))
	}
}

// sweep deletes the idle keys at now and, if more than limit remain, those
// with the fewest recent requests down to limit less an eighth; it sets
// when the next sweep comes. The caller holds mu.
func (c *Counts) sweep(now time.Time, w time.Duration, limit int) {
	c.visited += uint64(len(c.keys))
	for k, s := range c.keys {
		if s.decay(now, w); s.requests < idleBelow {
			delete(c.keys, k)
		}
	}
	if len(c.keys) > limit {
		c.drop(now, w, len(c.keys)-(limit-limit/8))
	}
	c.sweepAt = 2 * len(c.keys)
}

// drop deletes the n keys with the fewest recent requests at now. The
// caller holds mu.
func (c *Counts) drop(now time.Time, w time.Duration, n int) {
	c.visited += 3 * uint64(len(c.keys)) // the copy and the two passes below
	reqs := make([]float64, 0, len(c.keys))
	for _, s := range c.keys {
		s.decay(now, w) // a copy: decayed alike in each pass
		reqs = append(reqs, s.requests)
	}
	slices.Sort(reqs)
	cut, left := reqs[n-1], n // keys below cut go, then as many at it as n allows
	for k, s := range c.keys {
		if s.decay(now, w); s.requests < cut {
			delete(c.keys, k)
			left--
		}
	}
	for k, s := range c.keys {
		if left == 0 {
			break
		}
		if s.decay(now, w); s.requests == cut {
			delete(c.keys, k)
			left--
		}
	}
	c.dropped += uint64(n)
}

// Len returns the number of keys counted, and how many were dropped over
// the cap and visited by sweeps so far: for tests.
func (c *Counts) Len() (keys int, dropped, visited uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys), c.dropped, c.visited
}
