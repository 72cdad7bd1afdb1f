package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/throttle"
)

// acquireSlot takes one of key's slots of lim for a request, waiting for it
// under ctx if none is free or others wait (w.Queued says so). If ctx ends
// first, the error says how many were in flight, and wraps lim's.
func acquireSlot(ctx context.Context, lim keylimit.ConcurrencyLimiter[string], key string, w *Wait) (keylimit.Permit, error) {
	slot, r := lim.TryAcquire(key, 1)
	if r.Allowed {
		return slot, nil
	}
	w.Queued = true
	slot, err := lim.Acquire(ctx, key, 1)
	if err != nil {
		return keylimit.Permit{}, fmt.Errorf("httplimit: queued behind %s in flight, the most at once: %w", requests(r.Limit), err)
	}
	return slot, nil
}

// holdBody returns body, the body of an answer sent while holding slot,
// made to give the slot back once it is read to its end (or fails) or
// closed, or once ctx ends. A body with nothing to read (nil or
// http.NoBody) gives it back at once; the zero slot leaves body as it is.
// The slot goes back by Drop (throttle.Release) if failed says the answer is a
// failure, if reading the body fails, or if ctx's deadline passes first.
func holdBody(ctx context.Context, body io.ReadCloser, slot keylimit.Permit, failed bool) io.ReadCloser {
	if slot == (keylimit.Permit{}) {
		return body
	}
	if body == nil || body == http.NoBody {
		throttle.Release(slot, failed)
		return body
	}
	h := &heldBody{ReadCloser: body, slot: slot, failed: failed}
	if ctx.Done() != nil {
		// A request whose context ends is over, read or not: net/http
		// closes its connection (HTTP/1) or resets its stream (HTTP/2).
		h.stop = context.AfterFunc(ctx, func() {
			throttle.Release(slot, failed || errors.Is(ctx.Err(), context.DeadlineExceeded))
		})
	}
	if wb, ok := body.(io.ReadWriteCloser); ok {
		// A 101 Switching Protocols answer's body is the connection, and
		// its users write to it.
		return &heldWriteBody{heldBody: h, w: wb}
	}
	return h
}

// heldBody is the body of an answer that holds its request's slot of
// Transport.Concurrency. Read and Close may run at once (net/http's bodies
// allow it): a Permit's Release is safe for concurrent use, and only the
// first gives the slot back.
type heldBody struct {
	io.ReadCloser
	slot   keylimit.Permit
	failed bool        // the answer is a failure: the slot goes back by Drop
	stop   func() bool // context.AfterFunc's; nil for a context that never ends
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release(err != io.EOF) // the end, or the body failed: either way the answer is over
	}
	return n, err
}

func (b *heldBody) Close() error {
	err := b.ReadCloser.Close()
	b.release(false)
	return err
}

func (b *heldBody) release(failed bool) {
	if b.stop != nil {
		b.stop()
	}
	throttle.Release(b.slot, b.failed || failed)
}

// heldWriteBody is a heldBody that can be written to, as the body of a 101
// Switching Protocols answer must.
type heldWriteBody struct {
	*heldBody
	w io.Writer
}

func (b *heldWriteBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// requests formats a count of requests: "1 request", "3 requests".
func requests(n int) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%d requests", n)
}
