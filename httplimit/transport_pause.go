package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxServerPause bounds the pause an answer can ask for, only so that the
// arithmetic cannot overflow: about 31 years.
const maxServerPause = 1e9 * time.Second

// serverPause returns the time until which the answer resp, received at now,
// asks the client to send nothing more under the request's key, or the zero
// Time if it asks for no pause.
//
// On 429 and 503, Retry-After decides if it is there and valid (RFC 9110:
// when both are present, a client follows Retry-After); otherwise the
// RateLimit field: the largest t of its members with r=0, or if none has
// r=0, the largest t. On any other status only members with r=0 count: a
// server saying "none left for t seconds" on a 200 is obeyed too.
func serverPause(resp *http.Response, now time.Time) time.Time {
	refused := retryStatus(resp.StatusCode)
	if refused {
		if until, ok := retryAfter(resp.Header.Get(fieldRetryAfter), now); ok {
			return afterNow(until, now)
		}
	}
	fields := resp.Header[fieldRateLimit] // canonical already: no allocation
	if len(fields) == 0 {
		return time.Time{}
	}
	var exhausted, any int64 = -1, -1 // the largest t with r=0, and of all
	for _, m := range rateLimitMembers(strings.Join(fields, ",")) {
		if m.t < 0 {
			continue
		}
		any = max(any, m.t)
		if m.r == 0 {
			exhausted = max(exhausted, m.t)
		}
	}
	secs := exhausted
	if secs < 0 && refused {
		secs = any
	}
	if secs <= 0 {
		return time.Time{}
	}
	return now.Add(min(time.Duration(secs)*time.Second, maxServerPause))
}

// afterNow returns until, or the zero Time if it is not after now.
func afterNow(until, now time.Time) time.Time {
	if until.After(now) {
		return until
	}
	return time.Time{}
}

// retryAfter parses a Retry-After value (RFC 9110, Section 10.2.3): a
// number of seconds or an HTTP-date. It reports false for an absent or
// invalid value.
func retryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil && !isRangeError(err) {
			return time.Time{}, false
		}
		d := maxServerPause
		if secs < uint64(maxServerPause/time.Second) {
			d = time.Duration(secs) * time.Second
		}
		return now.Add(d), true
	}
	date, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	return date, true
}

func isRangeError(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// rateLimitMember is what the Transport reads of one member of a RateLimit
// field: its r (remaining) and t (seconds until quota is available again)
// parameters, -1 where absent or not a non-negative Integer.
type rateLimitMember struct{ r, t int64 }

// rateLimitMembers reads the members of a RateLimit field, a Structured
// Field List (RFC 9651) such as `"minute";r=0;t=42, "hour";r=90;t=600`.
// A member that does not parse is skipped; the others still count.
func rateLimitMembers(field string) []rateLimitMember {
	var out []rateLimitMember
	s := sfScanner{s: field}
	for {
		s.skipSpace()
		if s.done() {
			return out
		}
		if m, ok := s.member(); ok {
			out = append(out, m)
		}
		if !s.nextMember() {
			return out
		}
	}
}

// sfScanner reads a Structured Field List, leniently: it knows enough of
// RFC 9651 to find the members, their parameters and Integer values, and
// to skip strings, byte sequences and inner lists whole.
type sfScanner struct {
	s string
	i int
}

func (s *sfScanner) done() bool { return s.i >= len(s.s) }

func (s *sfScanner) peek() byte {
	if s.done() {
		return 0
	}
	return s.s[s.i]
}

func (s *sfScanner) skipSpace() {
	for !s.done() && (s.s[s.i] == ' ' || s.s[s.i] == '\t') {
		s.i++
	}
}

// member reads an item or inner list and its parameters, up to the comma or
// the end that must follow. It reports false if the member is malformed.
func (s *sfScanner) member() (rateLimitMember, bool) {
	m := rateLimitMember{r: -1, t: -1}
	if !s.skipValue() {
		return m, false
	}
	for s.peek() == ';' {
		s.i++
		s.skipSpace()
		key := s.paramKey()
		if key == "" {
			return m, false
		}
		n := int64(-1)
		if s.peek() == '=' {
			s.i++
			start := s.i
			if !s.skipValue() {
				return m, false
			}
			n = sfNonNegativeInteger(s.s[start:s.i])
		}
		switch key {
		case "r":
			m.r = n
		case "t":
			m.t = n
		}
	}
	s.skipSpace()
	return m, s.done() || s.peek() == ','
}

// paramKey reads a parameter's key: a lowercase letter or '*', then
// lowercase letters, digits, '_', '-', '.' and '*'.
func (s *sfScanner) paramKey() string {
	start := s.i
	for !s.done() {
		c := s.s[s.i]
		first := s.i == start
		if !(c >= 'a' && c <= 'z' || c == '*' || !first && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')) {
			break
		}
		s.i++
	}
	return s.s[start:s.i]
}

// skipValue skips one bare item or inner list. It reports false if there is
// none, or a string, byte sequence or inner list does not end.
func (s *sfScanner) skipValue() bool {
	switch s.peek() {
	case 0:
		return false
	case '"':
		return s.skipString()
	case ':':
		end := strings.IndexByte(s.s[s.i+1:], ':')
		s.i += end + 2
		return end >= 0
	case '(':
		s.i++
		for {
			s.skipSpace()
			switch s.peek() {
			case 0:
				return false
			case ')':
				s.i++
				return true
			}
			if !s.skipValue() {
				return false
			}
			for s.peek() == ';' { // an inner item's parameters
				s.i++
				s.skipSpace()
				if s.paramKey() == "" {
					return false
				}
				if s.peek() == '=' {
					s.i++
					if !s.skipValue() {
						return false
					}
				}
			}
		}
	}
	// A token, number, boolean, date or display string: up to a delimiter.
	start := s.i
	for !s.done() && !strings.ContainsRune(" \t,;()=", rune(s.s[s.i])) {
		if s.s[s.i] == '"' { // the string of a display string, %"..."
			if !s.skipString() {
				return false
			}
			continue
		}
		s.i++
	}
	return s.i > start
}

// skipString skips a String, from its opening quote to its closing one.
func (s *sfScanner) skipString() bool {
	for s.i++; !s.done(); s.i++ {
		switch s.s[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return true
		}
	}
	return false
}

// nextMember moves past the comma that ends the current member, skipping
// anything malformed before it, and reports whether there was one.
func (s *sfScanner) nextMember() bool {
	for !s.done() {
		switch s.s[s.i] {
		case ',':
			s.i++
			return true
		case '"':
			s.skipString()
		default:
			s.i++
		}
	}
	return false
}

// sfNonNegativeInteger parses a Structured Field Integer (at most 15
// digits) that is not negative, or returns -1.
func sfNonNegativeInteger(v string) int64 {
	if v == "" || len(v) > 15 {
		return -1
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return -1
		}
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}
