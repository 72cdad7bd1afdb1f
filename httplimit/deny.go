package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/keylimit/keylimit"
)

// body is the JSON of the default answers. As application/json it has
// "error"; as application/problem+json (RFC 9457) "title", "status" and
// "detail" instead, and the rest as extension members.
type body struct {
	Title             string `json:"title,omitempty"`
	Status            int    `json:"status,omitempty"`
	Detail            string `json:"detail,omitempty"`
	Error             string `json:"error,omitempty"`
	RetryAfterSeconds int64  `json:"retry_after_seconds,omitempty"`
	Policy            string `json:"policy,omitempty"`
	Limit             *int   `json:"limit,omitempty"`
	Remaining         *int   `json:"remaining,omitempty"`
}

// deny is the default Config.Deny: 429 (503 for an untracked key), with the
// decision in a JSON body.
func deny(w http.ResponseWriter, r *http.Request, d Decision) {
	res := d.Result
	status, msg := http.StatusTooManyRequests, "rate limit exceeded"
	switch {
	case res.RetryAfter == keylimit.InfDuration:
		msg = fmt.Sprintf("the request costs %d, more than policy %q admits at once (%d): it can never pass", d.Cost, d.Policy, res.Limit)
	case res.Untracked:
		status, msg = http.StatusServiceUnavailable, "the rate limiter is tracking as many clients as it can: try again later"
	}
	b := body{Policy: d.Policy, Limit: &res.Limit, Remaining: new(max(res.Remaining, 0))}
	if secs, ok := d.RetryAfterSeconds(); ok {
		b.RetryAfterSeconds = secs
	}
	write(w, r, status, msg, b)
}

// fail is the default Config.Error.
func fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNoKey):
		write(w, r, http.StatusBadRequest, err.Error(), body{})
		return
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		write(w, r, http.StatusServiceUnavailable, errEnded.Error(), body{})
		return
	}
	write(w, r, http.StatusInternalServerError, "httplimit: the server could not apply its rate limit to this request", body{})
}

// write answers with status and b, which says msg: as problem+json if the
// request asks for it, else as JSON.
func write(w http.ResponseWriter, r *http.Request, status int, msg string, b body) {
	contentType := "application/json"
	if wantsProblem(r) {
		contentType = "application/problem+json"
		b.Title, b.Status, b.Detail = http.StatusText(status), status, msg
	} else {
		b.Error = msg
	}
	out, err := json.Marshal(b)
	if err != nil {
		panic(err) // b holds only strings and integers
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	w.Write(append(out, '\n'))
}

// wantsProblem reports whether the Accept field of r names
// application/problem+json with a q above 0.
func wantsProblem(r *http.Request) bool {
	for _, line := range r.Header["Accept"] {
		for item := range strings.SplitSeq(line, ",") {
			mediaType, params, _ := strings.Cut(item, ";")
			if !strings.EqualFold(strings.TrimSpace(mediaType), "application/problem+json") {
				continue
			}
			return !refused(params)
		}
	}
	return false
}

// refused reports whether the media-type parameters params give a weight
// of 0. A weight that is not an RFC 9110 qvalue is ignored.
func refused(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(name, "q") {
			return zeroWeight(strings.TrimSpace(value))
		}
	}
	return false
}

// zeroWeight reports whether v is an RFC 9110 qvalue of 0: "0", or "0."
// and up to three '0's.
func zeroWeight(v string) bool {
	rest, ok := strings.CutPrefix(v, "0")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	decimals, ok := strings.CutPrefix(rest, ".")
	return ok && len(decimals) <= 3 && strings.Trim(decimals, "0") == ""
}
