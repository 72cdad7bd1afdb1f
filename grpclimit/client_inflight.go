package grpclimit

import (
	"context"
	"fmt"
	"io"

	"github.com/keylimit/keylimit"
	"google.golang.org/grpc"
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
// ending: for a pause the server asks for, and to give back slot when it
// ends. serverStreams is its StreamDesc's: whether the server may send
// more than one message.
func watch(ctx context.Context, cs grpc.ClientStream, c *Client, key string, serverStreams bool, slot keylimit.Permit) *watchedStream {
	s := &watchedStream{ClientStream: cs, c: c, key: key}
	if slot != (keylimit.Permit{}) {
		s.slot = streamSlot{permit: slot, serverStreams: serverStreams, held: true}
		if ctx.Done() != nil {
			s.slot.stop = context.AfterFunc(ctx, slot.Release)
		}
	}
	return s
}

// streamSlot is the slot of Client.Concurrency a stream holds, given back
// once the stream ends as grpc-go's NewStream says a stream ends (its
// context ending is context.AfterFunc's). A Permit's Release is safe for
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
// if the server sends only one (grpc-go reads the end after it).
func (s *streamSlot) afterRecv(err error) {
	if err != nil || !s.serverStreams {
		s.release()
	}
}

// afterSend ends the stream's hold after a SendMsg or Header that
// returned err: an error other than io.EOF ends the stream; io.EOF says
// that the server ended it, and the status is for RecvMsg to read.
func (s *streamSlot) afterSend(err error) {
	if err != nil && err != io.EOF {
		s.release()
	}
}

func (s *streamSlot) release() {
	if !s.held {
		return
	}
	if s.stop != nil {
		s.stop()
	}
	s.permit.Release()
}
