package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/throttle"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Client holds client interceptors that keep a gRPC client under a
// server's rate limit, and back off when the server says so: the other side
// of Server, as httplimit.Transport is of httplimit's middleware.
//
// Before each call (each stream, when it opens) it waits for the end of any
// pause the server put on the call's key, then for a slot of Concurrency,
// then for one event of Limiter under the key, never past the call's
// deadline: a wait for a pause or an event that would outlast it fails at
// once, taking nothing, with a *WaitError; a wait for a slot lasts until
// the context ends. A call that ends with
// ResourceExhausted or Unavailable and a retry delay, a google.rpc.RetryInfo
// detail or grpc-retry-pushback-ms trailer metadata, pauses its key for
// every call through the Client until then, for at most MaxPause. With
// FollowRateLimit, so does a unary call admitted with a ratelimit header in
// which a policy has r=0, for its t seconds.
//
// It is safe for concurrent use and must not be copied after first use. The
// zero Client keys calls by target, has no limit of its own, and obeys the
// server's pauses.
type Client struct {
	// Limiter is the client's own limit: every call waits for one event of
	// it under the call's key (keylimit.WaitN, bounded by the call's
	// context). Set it at or below the server's limit. nil means none.
	Limiter keylimit.Limiter[string]

	// Concurrency caps the calls in flight under each key: a call holds
	// one slot of it under its key, from before its turn at Limiter until
	// it returns (unary) or its stream ends. A stream ends, as grpc-go
	// defines it, when RecvMsg returns an error (io.EOF included), or a
	// message if the server sends only one; when SendMsg or Header returns
	// an error other than io.EOF; or when the call's context ends. A
	// stream left open otherwise (a ClientConn closed under it) holds its
	// slot until then: give the limiter keylimit.WithMaxHold to take such
	// slots back. A call whose key's slots are all held waits for one
	// under its context, first come, first served with a
	// *keylimit.Concurrency; if the context ends first, the call ends with
	// a *WaitError, unsent, holding nothing. nil means no cap. With a
	// *adaptive.Limiter the cap finds the server's capacity: the slot of a
	// call that fails (as Throttle counts failures: ResourceExhausted,
	// Unavailable, DeadlineExceeded, Internal, Unknown, DataLoss) goes back
	// by Permit.Drop, any other by Release.
	Concurrency keylimit.ConcurrencyLimiter[string]

	// Key returns the key of a call, from its context and full method
	// name, for Limiter and for the server's pauses: nil keys calls by the
	// target of their ClientConn (every call to one server shares the
	// client's limit and the server's pauses); Method by their method, for
	// a server that limits each method apart; or your own. A key of your
	// own that names the target too is a Client per ClientConn whose Key
	// holds its target (the Clients may share Limiter and Concurrency). A
	// call Key returns an error for is not sent; it ends with that error.
	Key KeyFunc

	// MaxPause is the longest pause a server's answer can put on a key: a
	// longer delay is cut to it, so that a server that asks for a year (by
	// mistake or malice) costs one more refused call a MaxPause. 0 means
	// DefaultMaxPause.
	MaxPause time.Duration

	// Clock is where the Client reads time and sleeps: pass the clock of
	// Limiter (keylimit.WithClock). nil means the system clock.
	Clock clock.Clock

	// FollowRateLimit makes a unary call admitted with ratelimit header
	// metadata in which a policy has nothing left (r=0) pause its key for
	// the largest such t: the seconds until that policy has more quota,
	// which is when the server admits the next call (the draft's reset
	// parameter; grpclimit's Server sends Result.RefillAfter), at most
	// MaxPause. A malformed value is ignored whole. It is for a Client
	// without a Limiter of its own: t is in whole seconds, rounded up, and
	// would slow a Limiter pacing several calls a second.
	FollowRateLimit bool

	// Throttle, if not 0, throttles calls adaptively, as Google's SRE book
	// has clients do ("Handling Overload"), and is its K: per key, the
	// Client counts its recent calls and those the server accepted, and
	// rejects a call locally, before any wait, with probability
	// max(0, (calls − Throttle × accepts) / (calls + 1)). A call counts
	// when its outcome comes, so that calls in flight never look like
	// failures; a rejected one counts at once, so a server that fails every
	// call gets about one each ThrottleWindow, and all of them again soon
	// after it recovers.
	// The call then ends with a *WaitError matching ErrThrottled, status
	// Unavailable, unsent. A call fails when it ends with
	// ResourceExhausted, Unavailable, DeadlineExceeded, Internal, Unknown
	// or DataLoss; it is accepted when it ends otherwise (a stream: when
	// its first message or its end comes); a call the caller cancelled
	// before either is not counted. 2 is the usual value: nothing is
	// rejected until the server fails half the calls. It must be 0 or a
	// finite number of at least 1, or every call fails with an error
	// saying so.
	Throttle float64

	// ThrottleWindow is how recent the counts of Throttle are: a call or
	// an accept weighs e^(−age/ThrottleWindow), so a steady rate counts as
	// many as a window of this length holds. Shorter reacts and comes back
	// sooner; longer sends fewer calls to a server that fails them all
	// (httplimit.Transport's ThrottleWindow says how much). 0 means 250 ms.
	// The Client counts at most 4,096 keys, as it keeps pauses: past that
	// it forgets the idle ones, then those with the fewest recent calls.
	ThrottleWindow time.Duration

	mu sync.RWMutex
	// paused maps a key to the end of the server's pause on it. Protected
	// by mu. A pause only ever grows later; an entry that has ended is
	// deleted when next read, or by a sweep (see sweepAbove); at most
	// maxPauses are kept.
	paused  map[string]time.Time
	sweepAt int // the number of pauses at which the next sweep runs; protected by mu

	throttle throttle.Counts // Throttle's counts, for at most maxPauses keys
	rand     func() float64  // Throttle's random numbers in [0, 1): nil means math/rand/v2's (SetRand in tests)
}

// DefaultMaxPause is the longest pause a server can put on a key of a
// Client whose MaxPause is 0.
const DefaultMaxPause = time.Minute

var systemClock = clock.New()

// UnaryInterceptor returns the interceptor that paces unary calls:
// grpc.NewClient(target, grpc.WithChainUnaryInterceptor(c.UnaryInterceptor())).
func (c *Client) UnaryInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		key, tk, err := c.wait(ctx, cc, method)
		if err != nil {
			return err
		}
		outcome := throttle.Forgotten // if invoker panics
		defer func() { c.end(key, tk, outcome) }()
		var header, trailer metadata.MD
		// A new slice: appending to opts could write into the caller's.
		all := append(append(make([]grpc.CallOption, 0, len(opts)+2), opts...), grpc.Header(&header), grpc.Trailer(&trailer))
		err = invoker(ctx, method, req, reply, cc, all...)
		outcome = callOutcome(err)
		c.observe(key, err, trailer)
		c.observeAdmitted(key, err, header)
		return err
	}
}

// StreamInterceptor returns the interceptor that paces streams, once each
// when it opens, and reads their ending:
// grpc.NewClient(target, grpc.WithChainStreamInterceptor(c.StreamInterceptor())).
func (c *Client) StreamInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		key, tk, err := c.wait(ctx, cc, method)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.end(key, tk, callOutcome(err))
			c.observe(key, err, nil)
			return nil, err
		}
		return watch(ctx, cs, c, key, desc.ServerStreams, tk), nil
	}
}

// watchedStream is a ClientStream whose ending the Client reads for a
// pause, whose outcome it counts in Throttle, and which gives back its slot
// of Concurrency when it ends.
type watchedStream struct {
	grpc.ClientStream
	c       *Client
	key     string
	once    sync.Once // reads the pause
	slot    streamSlot
	counted bool      // Throttle waits for the stream's outcome
	settled sync.Once // records its outcome
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && err != io.EOF {
		// The stream has ended with err; its trailer is complete.
		s.once.Do(func() { s.c.observe(s.key, err, s.ClientStream.Trailer()) })
	}
	o := callOutcome(err) // a message or the end: the server accepted the stream
	s.settle(o)
	s.slot.afterRecv(err, o == throttle.Failed)
	return err
}

func (s *watchedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	s.afterSend(err)
	return err
}

func (s *watchedStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	s.afterSend(err)
	return md, err
}

// afterSend ends the stream after a SendMsg or Header that returned an
// error other than io.EOF (io.EOF says that the server ended it, and the
// status is for RecvMsg to read).
func (s *watchedStream) afterSend(err error) {
	if err != nil && err != io.EOF {
		o := callOutcome(err)
		s.settle(o)
		s.slot.release(o == throttle.Failed)
	}
}

// settle records the stream's outcome in Throttle, the first time only,
// and stops watching the context of a stream that holds no slot.
func (s *watchedStream) settle(o throttle.Outcome) {
	s.record(o)
	if !s.slot.held && s.slot.stop != nil {
		s.slot.stop() // nothing else waits for the context
	}
}

// record records the stream's outcome in Throttle, the first time only.
func (s *watchedStream) record(o throttle.Outcome) {
	s.settled.Do(func() { s.c.record(s.key, s.counted, o) })
}

// wait returns the call's key once the call may be sent, and the slot of
// Concurrency it holds (the zero Permit if none) and the decision of
// Throttle, which it asks first, whose outcome is to be recorded. On an
// error, it holds nothing and leaves nothing to record.
func (c *Client) wait(ctx context.Context, cc *grpc.ClientConn, method string) (string, throttle.Ticket, error) {
	var key string
	var err error
	switch {
	case c.Key != nil:
		key, err = c.Key(ctx, method)
	case cc != nil:
		key = cc.Target()
	}
	if err == nil && (c.Throttle != 0 || c.ThrottleWindow != 0) {
		err = c.throttling().Check("grpclimit: Client.Throttle")
	}
	if err != nil {
		return "", throttle.Ticket{}, err
	}
	counted, err := c.admit(key)
	if err != nil {
		return "", throttle.Ticket{}, &WaitError{Key: key, Method: method, Until: c.pausedUntil(key, c.clock().Now()), Err: err}
	}
	clk := c.clock()
	// The server's pause first, so that a paused key does not hold tokens
	// or slots while it waits; then a slot, before the token, so that
	// tokens are spent as calls go out, not held by calls waiting for a
	// slot; then the Limiter's turn (its own WaitN if it has one: a
	// TokenBucket serves waiters first come, first served); then any pause
	// that began meanwhile, keeping the slot and the token.
	var slot keylimit.Permit
	err = c.waitPause(ctx, key, clk)
	if err == nil && c.Concurrency != nil {
		slot, err = acquireSlot(ctx, c.Concurrency, key)
	}
	if err == nil && c.Limiter != nil {
		err = keylimit.WaitN(ctx, c.Limiter, key, 1)
	}
	if err == nil {
		err = c.waitPause(ctx, key, clk)
	}
	tk := throttle.Ticket{Slot: slot, Counted: counted}
	if err != nil {
		c.end(key, tk, throttle.Forgotten)
		return "", throttle.Ticket{}, &WaitError{Key: key, Method: method, Until: c.pausedUntil(key, clk.Now()), Err: err}
	}
	return key, tk, nil
}

// waitPause waits, under ctx, until the server's pause on key has ended.
func (c *Client) waitPause(ctx context.Context, key string, clk clock.Clock) error {
	if c.pausedUntil(key, clk.Now()).IsZero() {
		return nil
	}
	return keylimit.WaitN[string](ctx, pauseGate{c}, key, 1)
}

// pauseGate is what a call waits on for the server's pause: it refuses
// while the pause on the key lasts, for as long as it has left, so that
// keylimit.WaitN sleeps it out under the call's deadline, on the Client's
// clock.
type pauseGate struct{ c *Client }

func (g pauseGate) Clock() clock.Clock { return g.c.clock() }

func (g pauseGate) Take(key string, _ int) keylimit.Result {
	now := g.c.clock().Now()
	if wait := g.c.pausedUntil(key, now).Sub(now); wait > 0 {
		return keylimit.Result{RetryAfter: wait}
	}
	return keylimit.Result{Allowed: true}
}

// observe reads how a call under key ended, and pauses the key if the
// server asked for a delay.
func (c *Client) observe(key string, err error, trailer metadata.MD) {
	if err == nil {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable {
		return
	}
	maxPause := c.MaxPause
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	d, ok := serverDelay(st, trailer, maxPause)
	if !ok || d <= 0 {
		return
	}
	now := c.clock().Now()
	c.pause(key, now.Add(d), now)
}

func (c *Client) clock() clock.Clock {
	if c.Clock != nil {
		return c.Clock
	}
	return systemClock
}

// WaitError is the error of a call the Client did not send: it could not
// wait for the call's turn, because the call's context ended, or would have
// ended first, or the Limiter can never admit a call. errors.Is and
// errors.As see through it to Err. status.Code reads its code: Canceled or
// DeadlineExceeded if the context ended, ResourceExhausted if the wait
// would have outlasted the deadline or can never end, Unavailable if
// Throttle rejected the call, Unknown otherwise.
type WaitError struct {
	Key    string // the call's key
	Method string // the call's full method name
	// Until is the end of the server's pause on Key, or the zero Time if
	// no pause was in effect.
	Until time.Time
	// Err is the error of the wait: one matching
	// keylimit.ErrWouldExceedDeadline (and context.DeadlineExceeded) if it
	// would have outlasted the deadline, the context's error if it ended
	// first, keylimit.ErrExceedsLimit if the Limiter can never admit a
	// call, one matching ErrThrottled if Throttle rejected it.
	// A wait for a slot of Concurrency fails only when the context ends
	// (how long the calls in flight take is not known): its error says how
	// many were in flight and wraps the context's.
	Err error
}

func (e *WaitError) Error() string {
	verb := "waiting to call"
	if errors.Is(e.Err, ErrThrottled) {
		verb = "not calling"
	}
	msg := fmt.Sprintf("grpclimit: %s %.256s under %.64q", verb, e.Method, e.Key) // bounded: a key or method may come from a request
	if !e.Until.IsZero() {
		msg += ", paused by the server until " + e.Until.UTC().Format("2006-01-02T15:04:05.999Z07:00")
	}
	return msg + ": " + e.Err.Error()
}

func (e *WaitError) Unwrap() error { return e.Err }

// GRPCStatus is the status of the call that was not sent, with the error's
// text.
func (e *WaitError) GRPCStatus() *status.Status {
	code := codes.Unknown
	switch {
	case errors.Is(e.Err, ErrThrottled):
		code = codes.Unavailable
	case errors.Is(e.Err, keylimit.ErrWouldExceedDeadline), errors.Is(e.Err, keylimit.ErrExceedsLimit):
		code = codes.ResourceExhausted
	case errors.Is(e.Err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(e.Err, context.Canceled):
		code = codes.Canceled
	}
	return status.New(code, e.Error())
}
