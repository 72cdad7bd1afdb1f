package quota

import (
	"strconv"
	"strings"
)

// rateLimitMember is what ReadRateLimit reads of one member of a RateLimit
// field: its r (remaining) and t (seconds until quota is available again)
// parameters, -1 where absent or not a non-negative Integer.
type rateLimitMember struct{ r, t int64 }

// ReadRateLimit reads the members of a RateLimit field, a Structured Field
// List (RFC 9651) such as `"minute";r=0;t=42, "hour";r=90;t=600`, and
// returns the largest t of the members with r=0 (exhausted: the seconds
// until a policy the client has used up has quota again) and of all
// members (any), -1 where there is none. A member that does not parse is
// skipped, as the draft asks of a client; the others still count. The lines
// of a field that came on several are read as one, joined by commas.
//
// It reads the field once, left to right, without recursion and without
// allocating: its time is linear in the field's length, whatever the field
// holds, and its memory constant. A caller that reads fields from a server
// bounds their length before (httplimit.Transport reads at most 8 KiB).
func ReadRateLimit(field string) (exhausted, any int64) {
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
