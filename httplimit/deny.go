package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/keylimit/keylimit/quota"
)

// The problem types of the draft's refusals (RFC 9457 problem details,
// registered by draft-ietf-httpapi-ratelimit-headers), and their titles as
// registered.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	problemAbnormalUsage   = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
)

// body is the JSON of the default answers. As application/json it has
// "error"; as application/problem+json (RFC 9457) "title", "status" and
// "detail" instead, a refusal's "type" and "violated-policies" too, and
// the rest as extension members.
type body struct {
	Type              string   `json:"type,omitempty"`
	Title             string   `json:"title,omitempty"`
	Status            int      `json:"status,omitempty"`
	Detail            string   `json:"detail,omitempty"`
	ViolatedPolicies  []string `json:"violated-policies,omitempty"`
	Error             string   `json:"error,omitempty"`
	RetryAfterSeconds int64    `json:"retry_after_seconds,omitempty"`
	Policy            string   `json:"policy,omitempty"`
	Limit             *int     `json:"limit,omitempty"`
	Remaining         *int     `json:"remaining,omitempty"`
}

// deny is the default Config.Deny: 429 (503 for an untracked key, and for
// a request an adaptive policy shed, quota.Decision.Shed), with the
// decision in a problem+json body (quota-exceeded; abnormal-usage-detected
// for a keylimit.Penalty's ban; temporary-reduced-capacity for a 503) for
// a client that accepts one, a JSON
// body for one that does not (see acceptsProblem). Its message says when
// the refusal is caused only by requests in flight (Decision.InFlight).
//
// contentType, if not nil, is the slice of one the Content-Type value is
// put in (see setFields).
func deny(w http.ResponseWriter, r *http.Request, v *quota.Verdict, contentType []string) {
	d := &v.Decision
	res := d.Result
	b := body{Policy: d.Policy, Limit: &res.Limit, Remaining: new(max(res.Remaining, 0))}
	if secs, ok := ratefields.RetryAfterSeconds(d.Result); ok {
		b.RetryAfterSeconds = secs
	}
	asProblem := acceptsProblem(r)
	var names [4]string // the violated policies, without an allocation for as many
	if asProblem {
		b.ViolatedPolicies = v.AppendViolatedPolicies(names[:0])
	}
	// A message that names the policy is written whole; the others' heads
	// are written once.
	var msg, problem, title string
	status := http.StatusTooManyRequests
	switch {
	case d.Shed:
		msg = fmt.Sprintf("policy %q is shedding load: the server is short of capacity, retry in %d s", d.Policy, b.RetryAfterSeconds)
		problem, title, status = problemReducedCapacity, "Temporary Reduced Capacity", http.StatusServiceUnavailable
		b.ViolatedPolicies = nil // a member of quota-exceeded only
	case res.RetryAfter == keylimit.InfDuration:
		msg = fmt.Sprintf("the request costs %d, more than policy %q admits at once (%d): it can never pass", d.Cost, d.Policy, res.Limit)
		problem, title = problemQuotaExceeded, "Quota Exceeded"
	case res.Untracked:
	case res.Banned:
		msg = fmt.Sprintf("too many requests refused by policy %q: refused outright until the ban ends", d.Policy)
		problem, title = problemAbnormalUsage, "Abnormal Usage Detected"
	case d.InFlight:
		msg = fmt.Sprintf("policy %q is held by requests still in flight, not spent: retry in %d s, when one of them may have ended", d.Policy, b.RetryAfterSeconds)
		problem, title = problemQuotaExceeded, "Quota Exceeded"
	}
	switch {
	case msg != "":
		if !asProblem {
			b.Error = msg
			send(w, status, "application/json", contentType, nil, b)
			return
		}
		b.Type, b.Title, b.Status, b.Detail = problem, title, status, msg
		send(w, status, "application/problem+json", contentType, nil, b)
	case res.Untracked:
		h := &heads[headReducedCapacity]
		if !asProblem {
			h = &heads[headReducedCapacityJSON]
		}
		send(w, http.StatusServiceUnavailable, h.contentType, contentType, h.json, b)
	default:
		h := &heads[headQuotaExceeded]
		if !asProblem {
			h = &heads[headQuotaExceededJSON]
		}
		send(w, http.StatusTooManyRequests, h.contentType, contentType, h.json, b)
	}
}

// head is the members a refusal's body opens with that are the same in
// every refusal of a kind (its type, title, status and message), as
// appendJSON writes them, the object left open: written once, not escaped
// again for every request. The members that follow come after them in
// body's order: a JSON body (with "error") has no violated-policies.
type head struct {
	contentType string
	json        []byte
}

// The kinds of refusal that have a head, as heads' indexes.
const (
	headQuotaExceeded = iota
	headQuotaExceededJSON
	headReducedCapacity
	headReducedCapacityJSON
)

var heads = func() (hs [4]head) {
	const (
		exceeded = "rate limit exceeded"
		full     = "the rate limiter is tracking as many clients as it can: try again later"
	)
	for i, c := range []struct {
		contentType string
		b           body
	}{
		headQuotaExceeded:       {"application/problem+json", body{Type: problemQuotaExceeded, Title: "Quota Exceeded", Status: http.StatusTooManyRequests, Detail: exceeded}},
		headQuotaExceededJSON:   {"application/json", body{Error: exceeded}},
		headReducedCapacity:     {"application/problem+json", body{Type: problemReducedCapacity, Title: "Temporary Reduced Capacity", Status: http.StatusServiceUnavailable, Detail: full}},
		headReducedCapacityJSON: {"application/json", body{Error: full}},
	} {
		j := c.b.appendJSON(nil)
		hs[i] = head{c.contentType, j[:len(j)-1]} // without its '}'
	}
	return hs
}()

// fail is the default Config.Error.
func fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, quota.ErrNoKey):
		write(w, r, http.StatusBadRequest, err.Error(), body{})
		return
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		write(w, r, http.StatusServiceUnavailable, errEnded.Error(), body{})
		return
	}
	write(w, r, http.StatusInternalServerError, "httplimit: the server could not apply its rate limit to this request", body{})
}

// write answers an error with status and b, which says msg: as
// problem+json if the request names that type (wantsProblem), else as
// JSON.
func write(w http.ResponseWriter, r *http.Request, status int, msg string, b body) {
	if wantsProblem(r) {
		b.Title, b.Status, b.Detail = http.StatusText(status), status, msg
		send(w, status, "application/problem+json", nil, nil, b)
		return
	}
	b.Error = msg
	send(w, status, "application/json", nil, nil, b)
}

// send answers with status and a body of contentType: head, the members
// that open it (if not nil), then b's. The Content-Type value is put in
// value, a slice of one, or a new one if value is nil.
func send(w http.ResponseWriter, status int, contentType string, value []string, head []byte, b body) {
	buf := bodies.Get().(*[]byte)
	defer bodies.Put(buf)
	out := append((*buf)[:0], head...)
	if head != nil {
		out = b.appendMembers(out, 0)
	} else {
		out = b.appendJSON(out)
	}
	out = append(out, '\n')
	if cap(out) <= maxPooledBody {
		*buf = out
	}
	if value == nil {
		value = make([]string, 1)
	}
	value[0] = contentType
	w.Header()[fieldContentType] = value
	w.WriteHeader(status)
	w.Write(out) // which must not keep out (io.Writer): it goes back to bodies
}

// bodies holds the buffers send writes bodies into: a problem of one
// policy is about 230 bytes.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBody is the largest buffer put back in bodies: a body of many
// long policy names (or a long error) is not kept for every request after.
const maxPooledBody = 4 << 10

// accepted is the weight an Accept field gives a media type (RFC 9110,
// Section 12.5.1), in thousandths, and how specific the media range that
// gave it: 0 none, 1 */*, 2 application/*, 3 the type itself.
type accepted struct{ q, by int }

// from records the weight q of a range as specific as by, if it is more
// specific than the one recorded: the most specific range decides, and of
// ranges as specific, the first.
func (a *accepted) from(q, by int) {
	if by > a.by {
		a.q, a.by = q, by
	}
}

// acceptsProblem reports whether a refusal of r is answered as
// application/problem+json: r accepts that type (with a weight above 0, by
// naming it, or application/* or */*, or by sending no Accept at all, which
// accepts any type; so does an Accept field of empty lines) and prefers
// application/json no more. A client that
// accepts application/json and not problem+json, or prefers it, gets the
// JSON body.
func acceptsProblem(r *http.Request) bool {
	problem, json, ranges := acceptWeights(r.Header["Accept"])
	return ranges == 0 || problem.q > 0 && problem.q >= json.q
}

// wantsProblem reports whether the Accept field of r names
// application/problem+json with a weight above 0.
func wantsProblem(r *http.Request) bool {
	problem, _, _ := acceptWeights(r.Header["Accept"])
	return problem.by == 3 && problem.q > 0
}

// acceptWeights returns the weights the Accept lines give
// application/problem+json and application/json, and how many media ranges
// they hold: an Accept field of none (empty lines) is no Accept field.
func acceptWeights(lines []string) (problem, json accepted, ranges int) {
	for _, line := range lines {
		for element := range strings.SplitSeq(line, ",") {
			mediaRange, params, _ := strings.Cut(element, ";")
			mediaRange = strings.TrimSpace(mediaRange)
			if mediaRange == "" {
				continue
			}
			ranges++
			q := weight(params)
			switch {
			case mediaRange == "*/*":
				problem.from(q, 1)
				json.from(q, 1)
			case strings.EqualFold(mediaRange, "application/*"):
				problem.from(q, 2)
				json.from(q, 2)
			case strings.EqualFold(mediaRange, "application/problem+json"):
				problem.from(q, 3)
			case strings.EqualFold(mediaRange, "application/json"):
				json.from(q, 3)
			}
		}
	}
	return problem, json, ranges
}

// weight returns the weight the media-type parameters params give, in
// thousandths: that of their first q parameter, or 1000 if there is none
// or it is not an RFC 9110 qvalue ("0" or "1", then "." and up to three
// digits, 1's all 0), which is ignored.
func weight(params string) int {
	for p := range strings.SplitSeq(params, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
		if !strings.EqualFold(name, "q") {
			continue
		}
		v := strings.TrimSpace(value)
		if v == "" || v[0] != '0' && v[0] != '1' {
			return 1000
		}
		q := int(v[0]-'0') * 1000
		if len(v) == 1 {
			return q
		}
		decimals, ok := strings.CutPrefix(v[1:], ".")
		if !ok || len(decimals) > 3 {
			return 1000
		}
		for i, scale := 0, 100; i < len(decimals); i, scale = i+1, scale/10 {
			c := decimals[i]
			if c < '0' || c > '9' || q == 1000 && c != '0' {
				return 1000
			}
			q += int(c-'0') * scale
		}
		return q
	}
	return 1000
}
