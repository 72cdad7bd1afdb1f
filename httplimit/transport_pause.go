package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxServerPause bounds the pause an answer can ask for, so that the
// arithmetic cannot overflow: 10⁹ seconds, about 31 years. A longer
// Retry-After, RateLimit t or HTTP-date is read as this.
const maxServerPause = 1e9 * time.Second

// maxRateLimitField is the most bytes of RateLimit field lines, together,
// that the Transport reads: a real one is a few dozen bytes per policy. A
// longer field is not read (it asks for no pause), so that the work an
// answer makes is bounded by this, not by the response header limit.
const maxRateLimitField = 8 << 10

// serverPause returns the time until which the answer resp, received at now,
// asks the client to send nothing more under the request's key, or the zero
// Time if it asks for no pause. refused says whether the answer refuses the
// request for now (Transport.Refused: 429 and 503 by default).
//
// On a refusal, Retry-After decides if it is there and valid (RFC 9110:
// when both are present, a client follows Retry-After); otherwise the
// RateLimit field: the largest t of its members with r=0, or if none has
// r=0, the largest t. On any other answer only members with r=0 count: a
// server saying "none left for t seconds" on a 200 is obeyed too.
func serverPause(resp *http.Response, refused bool, now time.Time) time.Time {
	if refused {
		if until, ok := retryAfter(resp.Header.Get(fieldRetryAfter), now); ok {
			return afterNow(until, now)
		}
	}
	fields := resp.Header[fieldRateLimit] // canonical already: no allocation
	size := 0
	for _, f := range fields {
		size += len(f) + 1
	}
	if size == 0 || size > maxRateLimitField+1 {
		return time.Time{}
	}
	// RFC 9651 reads the lines of a field as one list, joined by commas.
	// Join returns a lone line as it is.
	exhausted, any := rateLimitTimes(strings.Join(fields, ","))
	secs := exhausted
	if secs < 0 && refused {
		secs = any
	}
	if secs <= 0 {
		return time.Time{}
	}
	return now.Add(pauseSeconds(uint64(secs)))
}

// pauseSeconds is secs seconds, at most maxServerPause. It clamps before it
// multiplies: time.Duration(secs)*time.Second wraps from 9,223,372,037 s on.
func pauseSeconds(secs uint64) time.Duration {
	if secs >= uint64(maxServerPause/time.Second) {
		return maxServerPause
	}
	return time.Duration(secs) * time.Second
}

// afterNow returns until, or the zero Time if it is not after now.
func afterNow(until, now time.Time) time.Time {
	if until.After(now) {
		return until
	}
	return time.Time{}
}

// retryAfter parses a Retry-After value (RFC 9110, Section 10.2.3): a
// number of seconds or an HTTP-date, either at most maxServerPause from now.
// It reports false for an absent or invalid value.
func retryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.Trim(v, " \t") // OWS
	if v == "" {
		return time.Time{}, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		// All digits first: ParseUint reports a range error, not a syntax
		// error, for "18700000000000000000A".
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return time.Time{}, false
			}
		}
		secs, _ := strconv.ParseUint(v, 10, 64) // on a range error, the largest uint64
		return now.Add(pauseSeconds(secs)), true
	}
	date, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	if date.Sub(now) > maxServerPause { // Sub saturates: no overflow
		date = now.Add(maxServerPause)
	}
	return date, true
}

// rateLimitMember is what the Transport reads of one member of a RateLimit
// field: its r (remaining) and t (seconds until quota is available again)
// parameters, -1 where absent or not a non-negative Integer.
type rateLimitMember struct{ r, t int64 }

// rateLimitTimes reads the members of a RateLimit field, a Structured Field
// List (RFC 9651) such as `"minute";r=0;t=42, "hour";r=90;t=600`, and
// returns the largest t of the members with r=0 (exhausted) and of all
// members (any), -1 where there is none. A member that does not parse is
// skipped; the others still count.
//
// It reads the field once, left to right, without recursion and without
// allocating: its time is linear in the field's length, whatever the field
// holds, and its memory constant.
func rateLimitTimes(field string) (exhausted, any int64) {
	exhausted, any = -1, -1
	s := sfScanner{s: field}
	for {
		s.skipSpace()
		if s.done() {
			return exhausted, any
		}
		if m, ok := s.member(); ok && m.t >= 0 {
			any = max(any, m.t)
			if m.r == 0 {
				exhausted = max(exhausted, m.t)
			}
		}
		if !s.nextMember() {
			return exhausted, any
		}
	}
}

// sfScanner reads a Structured Field List, leniently: it knows enough of
// RFC 9651 to find the members, their parameters and Integer values, and
// to skip strings, byte sequences and inner lists whole. Every method moves
// forward only, and none calls itself: each byte is looked at a bounded
// number of times.
type sfScanner struct {
	s string
	i int
}

func (s *sfScanner) done() bool { return s.i >= len(s.s) }

// peek returns the byte at the scanner, or 0 at the end (a NUL byte in the
// field, never valid there, reads as an end too).
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
	ok := false
	if s.peek() == '(' {
		ok = s.skipInnerList()
	} else {
		ok = s.skipBareItem()
	}
	if !ok || !s.params(&m) {
		return m, false
	}
	s.skipSpace()
	return m, s.done() || s.peek() == ','
}

// params reads the parameters after an item, ";key" or ";key=value" each,
// and records r and t in m if m is not nil. RFC 9651 keeps the last of
// repeated keys; so does params. It reports false if one is malformed.
func (s *sfScanner) params(m *rateLimitMember) bool {
	for s.peek() == ';' {
		s.i++
		s.skipSpace()
		key := s.paramKey()
		if key == "" {
			return false
		}
		n := int64(-1)
		if s.peek() == '=' {
			s.i++
			start := s.i
			if !s.skipBareItem() {
				return false
			}
			n = sfNonNegativeInteger(s.s[start:s.i])
		}
		if m != nil {
			switch key {
			case "r":
				m.r = n
			case "t":
				m.t = n
			}
		}
	}
	return true
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

// skipInnerList skips an inner list, from its '(' to its ')': bare items
// with parameters, separated by spaces. Inner lists do not nest in RFC
// 9651, so a '(' inside one makes it malformed: it reports false then, or
// if the list does not end.
func (s *sfScanner) skipInnerList() bool {
	s.i++ // '('
	for {
		s.skipSpace()
		switch s.peek() {
		case 0, '(':
			return false
		case ')':
			s.i++
			return true
		}
		if !s.skipBareItem() || !s.params(nil) {
			return false
		}
	}
}

// skipBareItem skips one bare item: a string, a byte sequence, or a token,
// number, boolean, date or display string. It reports false, having moved
// past nothing or past a malformed item, if there is none there or a
// string or byte sequence does not end; true only if it moved.
func (s *sfScanner) skipBareItem() bool {
	switch s.peek() {
	case 0, '(', ')':
		return false
	case '"':
		return s.skipString()
	case ':':
		end := strings.IndexByte(s.s[s.i+1:], ':')
		if end < 0 {
			return false
		}
		s.i += end + 2
		return true
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

// sfNonNegativeInteger parses a Structured Field Integer (an optional '-'
// and 1 to 15 digits) that is not negative ("-0" is 0), or returns -1.
func sfNonNegativeInteger(v string) int64 {
	digits := strings.TrimPrefix(v, "-")
	if digits == "" || len(digits) > 15 {
		return -1
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return -1
		}
	}
	n, _ := strconv.ParseInt(digits, 10, 64)
	if n != 0 && len(digits) < len(v) {
		return -1 // negative
	}
	return n
}
