package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// call is what one script call needs besides the client: its context with a
// deadline, and the keys and arguments it passes. Calls are reused through a
// pool, so that a decision allocates only what the client itself does:
// context.WithTimeout alone would cost five allocations and about 400 bytes
// per call, and the keys and arguments slices two more.
//
// The client copies keys and args into its command before it returns and
// uses the context only while the call runs, so a call may be reused as
// soon as the script call has returned.
type call struct {
	keys [inlineParts]string
	args [4 + 4*inlineParts]any
	ctx  callContext
}

// inlineParts is how many limiters a call decides for without allocating
// its keys and arguments: keylimit.All of up to four Redis limiters.
const inlineParts = 4

var calls = sync.Pool{New: func() any {
	c := new(call)
	c.ctx.done = make(chan struct{})
	c.ctx.timer = time.AfterFunc(time.Hour, c.ctx.expire)
	c.ctx.timer.Stop()
	return c
}}

// callContext is a context with a deadline over a parent that can never be
// cancelled (context.Background(), or one with values only), which is what
// Take, Peek, Reset and Refund run under. Unlike a context from
// context.WithTimeout, it can be reused: its timer is reset for each call
// and stopped after it.
type callContext struct {
	parent   context.Context // its Done is nil: it never ends by itself
	deadline time.Time
	// timer closes done at the deadline, after setting expired.
	timer   *time.Timer
	done    chan struct{}
	expired atomic.Bool
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callContext) Done() <-chan struct{}       { return c.done }
func (c *callContext) Value(key any) any           { return c.parent.Value(key) }

func (c *callContext) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// expire ends the context: Err is set before Done is closed, as the context
// contract asks.
func (c *callContext) expire() {
	c.expired.Store(true)
	close(c.done)
}

// startCall returns a call whose context is parent with a deadline timeout
// from now, and a function to end it with. When parent can be cancelled,
// the context is one of context.WithTimeout, which follows it.
func startCall(parent context.Context, timeout time.Duration) (*call, context.Context, context.CancelFunc) {
	c := calls.Get().(*call)
	if parent.Done() != nil {
		ctx, cancel := context.WithTimeout(parent, timeout)
		return c, ctx, cancel
	}
	c.ctx.parent = parent
	c.ctx.deadline = time.Now().Add(timeout)
	c.ctx.timer.Reset(timeout)
	return c, &c.ctx, nil
}

// end releases c once its script call has returned, with cancel, the
// cancel function startCall gave, if any. A call whose timer fired (or is
// firing) is done for good: it goes to the garbage collector, not back to
// the pool.
func (c *call) end(cancel context.CancelFunc) {
	c.keys = [inlineParts]string{}
	c.args = [4 + 4*inlineParts]any{}
	if cancel != nil {
		cancel()
		calls.Put(c)
		return
	}
	c.ctx.parent = nil
	if c.ctx.timer.Stop() {
		calls.Put(c)
	}
}
