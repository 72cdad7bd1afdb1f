// Package compose carries what keylimit's compositions ask of the limiters
// of other packages of this repository, so that no limiter exports a method
// for it: keylimit.All asks whether its limiters can decide together in
// one step (redislimit's, one script call), and quota which limiter a
// wrapper (a Penalty) reports the window of, the clock a window reads its
// time from, and an adaptive.Limiter's TryAcquire at a request's
// criticality. Each package registers its
// functions from an init function; the compositions ask here. The other
// way round, redislimit makes a keylimit.Penalty whose bans are on Redis
// by NewPenalty, and reads keylimit's Options by NewOption and
// SplitOptions, which keylimit sets.
package compose

import (
	"log/slog"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// registry is the functions registered for one question: each answers for
// the inputs it knows, false for the others.
type registry[In, Out any] struct {
	mu sync.RWMutex
	fs []func(In) (Out, bool)
}

func (r *registry[In, Out]) add(f func(In) (Out, bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fs = append(r.fs, f)
}

// find returns the answer of the first function that knows in.
func (r *registry[In, Out]) find(in In) (Out, bool) {
	r.mu.RLock()
	fs := r.fs
	r.mu.RUnlock()
	for _, f := range fs {
		if out, ok := f(in); ok {
			return out, true
		}
	}
	var none Out
	return none, false
}

var (
	joins  registry[[]any, any]
	inners registry[any, any]
	tries  registry[any, any]
	clocks registry[any, clock.Clock]
)

// RegisterJoin adds f, which returns a limiter that decides for all of ls
// at once (ls[0] first), with keylimit.All's semantics, or false if it
// cannot join them all.
func RegisterJoin(f func(ls []any) (any, bool)) { joins.add(f) }

// CanJoin reports whether a function that joins limiters is registered, so
// that a caller with none builds no slice to ask Join.
func CanJoin() bool {
	joins.mu.RLock()
	defer joins.mu.RUnlock()
	return len(joins.fs) > 0
}

// Join returns what the first registered function that can join ls
// returns, or false if none can.
func Join(ls []any) (any, bool) { return joins.find(ls) }

// RegisterInner adds f, which returns the limiter that l wraps, or false
// if l is no wrapper f knows.
func RegisterInner(f func(l any) (any, bool)) { inners.add(f) }

// Inner returns the limiter that l wraps, or false if no registered
// function knows l.
func Inner(l any) (any, bool) { return inners.find(l) }

// RegisterTryContext adds f, which returns, for a concurrency limiter l that
// decides by the request's context (adaptive.Limiter, by its
// criticality), its TryAcquire under a context: a
// func(ctx context.Context, key string, n int) (keylimit.Permit, keylimit.Result),
// or false if l is none f knows.
func RegisterTryContext(f func(l any) (any, bool)) { tries.add(f) }

// TryContext returns what the first registered function that knows l
// returns, or false if none does.
func TryContext(l any) (any, bool) { return tries.find(l) }

// RegisterClock adds f, which returns the clock a limiter l reads its
// time from (keylimit.WithClock's; nil for the system's), or false if l is
// none f knows. quota reads a calendar period's bounds at the limiter's
// time, through ClockOf.
func RegisterClock(f func(l any) (clock.Clock, bool)) { clocks.add(f) }

// ClockOf returns the clock l reads its time from, or nil for the system's
// (or if no registered function knows l).
func ClockOf(l any) clock.Clock {
	c, _ := clocks.find(l)
	return c
}

// NewPenalty, set by keylimit's init, returns a *keylimit.Penalty[string]
// that wraps inner (a keylimit.Limiter[string]) and bans by ban (a
// keylimit.Ban), its bans kept in the store newBans returns, called once
// inner and ban are found valid: redislimit's NewPenalty, whose store
// keeps them on Redis, implements keylimit's banStore.
var NewPenalty func(inner, ban any, newBans func() (any, error)) (any, error)

// NewOption, set by keylimit's init, returns a keylimit.Option that
// carries ext, an option of redislimit's (a func(*options) of its own),
// which keylimit's limiters refuse: redislimit's limiters take
// keylimit.Option, so that keylimit's WithClock, WithLogger and
// WithMaxHold are theirs too.
var NewOption func(ext any) any

// SplitOptions, set by keylimit's init, reads opts, a []keylimit.Option,
// for a redislimit limiter: the ext of each option NewOption made, in
// order, and what keylimit's own options set, or the first invalid one's
// error (one of keylimit's options that a Redis limiter has no use for
// included).
var SplitOptions func(opts any) (exts []any, own Shared, err error)

// Shared is what keylimit's options set for a redislimit limiter.
type Shared struct {
	Clock   clock.Clock   // WithClock's; nil if not given
	Logger  *slog.Logger  // WithLogger's; nil if not given
	MaxHold time.Duration // WithMaxHold's; 0 if not given
}
