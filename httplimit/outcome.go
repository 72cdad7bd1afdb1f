package httplimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/keylimit/keylimit/quota"
)

// The outcome of a request, for the policies charged by outcome
// (quota.Policy.Charge): its status, and the cost its handler reported.

// outcomeWriter is the ResponseWriter a handler gets when its request's
// tier has a policy charged by outcome: it records the status written, and
// takes the cost header (Config.CostHeader) out of the response before it
// is sent. Unwrap gives the server's writer to http.ResponseController,
// and Flush flushes it, so streaming handlers keep working.
type outcomeWriter struct {
	http.ResponseWriter
	costHeader string // "" if none
	status     int    // 0 until the header is written
	reported   int    // from costHeader, -1 if none or invalid
}

func (w *outcomeWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are not the response's status
		w.status = code
		w.takeCost()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
		w.takeCost()
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the server's writer, if it can (http.ResponseController).
func (w *outcomeWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
		w.takeCost()
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the server's writer, for http.ResponseController.
func (w *outcomeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// takeCost reads the cost header the handler set, and deletes it: it is
// the handler's word to the middleware, not to the client.
func (w *outcomeWriter) takeCost() {
	if w.costHeader == "" {
		return
	}
	h := w.ResponseWriter.Header()
	if vs, ok := h[w.costHeader]; ok {
		if len(vs) == 1 {
			w.reported = parseCost(vs[0])
		}
		delete(h, w.costHeader)
	}
}

// outcome is the Outcome of the request whose context is ctx, once its
// handler has returned (or panicked, if ended is false).
func (w *outcomeWriter) outcome(ctx context.Context, ended bool) quota.Outcome {
	if w.status == 0 { // nothing written: net/http answers 200, or fails
		w.takeCost()
		w.status = http.StatusOK
		if !ended {
			w.status = http.StatusInternalServerError
		}
	}
	expired := errors.Is(ctx.Err(), context.DeadlineExceeded)
	return quota.Outcome{Status: w.status, Reported: w.reported, Panicked: !ended, Expired: expired}
}

// maxCostDigits bounds a reported cost: 18 decimal digits fit an int64.
const maxCostDigits = 18

// parseCost reads a reported cost, a decimal number of at most 18 digits
// with nothing around it, or returns -1 (none): a value from a handler
// that may pass on an upstream's headers is read in bounded time and
// trusted only that far.
func parseCost(s string) int {
	if s == "" || len(s) > maxCostDigits {
		return -1
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// serveCharged serves a request whose Verdict NeedsOutcome (a policy
// charged by outcome, or an adaptive one): the handler gets a writer that
// records its outcome and a context ReportCost reaches, and the request
// ends with FinishWith, however the handler ends.
func (h *handler) serveCharged(w http.ResponseWriter, r *http.Request, v *quota.Verdict) {
	ow := &outcomeWriter{ResponseWriter: w, costHeader: h.m.costHeader, reported: -1}
	ended := false
	defer func() { v.FinishWith(ow.outcome(r.Context(), ended)) }()
	h.next.ServeHTTP(ow, r.WithContext(v.Context(r.Context())))
	ended = true
}
