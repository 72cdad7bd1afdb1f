package grpclimit

import (
	"context"
	"fmt"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/throttle"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// acquireSlot takes one of key's slots of lim for a call, waiting for it
// under ctx if none is free or others wait. If ctx ends first, the error
// says how many were in flight, and wraps lim's.
func acquireSlot(ctx context.Context, lim keylimit.ConcurrencyLimiter[string], key string) (keylimit.Permit, error) {
	slot, r := lim.TryAcquire(key, 1)
	if r.Allowed {
		return slot, nil
	}
	slot, err := lim.Acquire(ctx, key, 1)
	if err != nil {
		return keylimit.Permit{}, fmt.Errorf("grpclimit: queued behind %s in flight, the most at once: %w", calls(r.Limit), err)
	}
	return slot, nil
}

// calls formats a count of calls: "1 call", "3 calls".
func calls(n int) string {
	if n == 1 {
		return "1 call"
	}
	return fmt.Sprintf("%d calls", n)
}

// watch returns cs, a stream of key opened under ctx, watched for its
// ending: for a pause the server asks for, for its outcome in Throttle,
// and to give back tk's slot when it ends. serverStreams is its
// StreamDesc's: whether the server may send more than one message. If ctx
// ends first, the stream fails if its deadline passed, and is not counted
// if it was cancelled.
func watch(ctx context.Context, cs grpc.ClientStream, c *Client, key string, serverStreams bool, tk throttle.Ticket) *watchedStream {
	s := &watchedStream{ClientStream: cs, c: c, key: key, counted: tk.Counted}
	s.slot = streamSlot{permit: tk.Slot, serverStreams: serverStreams, held: tk.Slot != (keylimit.Permit{})}
	if ctx.Done() != nil && (s.slot.held || tk.Counted) {
		// The function may run before AfterFunc returns: it reads nothing
		// that is written after (not stop).
		s.slot.stop = context.AfterFunc(ctx, func() {
			o := callOutcome(status.FromContextError(ctx.Err()).Err())
			s.record(o)
			if s.slot.held {
				throttle.Release(s.slot.permit, o == throttle.Failed)
			}
		})
	}
	return s
}

// streamSlot is the slot of Client.Concurrency a stream holds, given back
// once the stream ends as grpc-go's NewStream says a stream ends (its
// context ending is context.AfterFunc's, which also settles the stream's
// outcome in Throttle: stop is set for a stream that holds no slot too). A Permit's Release is safe for
// concurrent use and only the first gives the slot back, so the methods of
// the stream may end it from several goroutines at once (RecvMsg on one,
// SendMsg on another, as grpc-go allows), and the context too.
type streamSlot struct {
	permit        keylimit.Permit
	serverStreams bool
	held          bool        // a slot is held: Concurrency is set
	stop          func() bool // context.AfterFunc's; nil for a context that never ends
}

// afterRecv ends the stream's hold after a RecvMsg that returned err: any
// error ends the stream (io.EOF, its end, included), and so does a message
// if the server sends only one (grpc-go reads the end after it). failed
// says that err is a failure: the slot goes back by Drop.
func (s *streamSlot) afterRecv(err error, failed bool) {
	if err != nil || !s.serverStreams {
		s.release(failed)
	}
}

// release gives the slot back, by Drop if failed (throttle.Release).
func (s *streamSlot) release(failed bool) {
	if !s.held {
		return
	}
	if s.stop != nil {
		s.stop()
	}
	throttle.Release(s.permit, failed)
}
