package ratefields

import (
	"strings"
	"unicode/utf8"
)

// rateLimitMember is what ReadRateLimit reads of one member of a RateLimit
// field: its r (remaining) and t (seconds until quota is available again)
// parameters, -1 where absent or not a non-negative Integer.
type rateLimitMember struct{ r, t int64 }

// ReadRateLimit reads a RateLimit field, a Structured Field List (RFC 9651)
// such as `"minute";r=0;t=42, "hour";r=90;t=600`, and returns the largest t
// of the members with r=0 (exhausted: the seconds until a policy the client
// has used up has quota again) and of all members (any), -1 where there is
// none. The lines of a field that came on several are read as one, joined
// by commas.
//
// It reads as strictly as RFC 9651 parses and as the draft asks of a
// client ("malformed RateLimit header fields MUST be ignored"): a field
// that is not a valid List is ignored whole, and returns -1, -1. Of a valid
// one, a member counts only if its value is a String, the name of a policy
// (a Token or an Inner List names none), and r and t only if they are
// non-negative Integers. Byte Sequences are base64 with padding, as
// encoding/base64's StdEncoding decodes them.
//
// It reads the field once, left to right, without recursion and without
// allocating: its time is linear in the field's length, whatever the field
// holds, and its memory constant. A caller that reads fields from a server
// bounds their length before (httplimit.Transport reads at most 8 KiB).
func ReadRateLimit(field string) (exhausted, any int64) {
	// The results are kept apart until the whole field has parsed: a field
	// that fails at its last byte says nothing.
	e, a := int64(-1), int64(-1)
	s := sfScanner{s: field}
	s.skipSP()
	for !s.done() {
		m, named, ok := s.member()
		if !ok {
			return -1, -1
		}
		if named && m.t >= 0 {
			a = max(a, m.t)
			if m.r == 0 {
				e = max(e, m.t)
			}
		}
		s.skipOWS()
		if s.done() {
			break
		}
		if s.s[s.i] != ',' {
			return -1, -1
		}
		s.i++
		s.skipOWS()
		if s.done() {
			return -1, -1 // a trailing comma
		}
	}
	return e, a
}

// sfKind is the type of a bare item, as far as the reader needs it.
type sfKind uint8

const (
	sfOther sfKind = iota // a Token, Decimal, Byte Sequence, Boolean, Date or Display String
	sfString
	sfInteger
)

// sfScanner parses a Structured Field List by RFC 9651's algorithms
// (Section 4.2), keeping only what ReadRateLimit needs. Every method moves
// forward only, and none calls itself (inner lists do not nest): each byte
// is looked at a bounded number of times.
type sfScanner struct {
	s string
	i int
}

func (s *sfScanner) done() bool { return s.i >= len(s.s) }

// peek returns the byte at the scanner, or 0 at the end. A NUL byte, valid
// nowhere in a field, reads as an end too: both fail wherever a byte is
// needed.
func (s *sfScanner) peek() byte {
	if s.done() {
		return 0
	}
	return s.s[s.i]
}

func (s *sfScanner) skipSP() {
	for !s.done() && s.s[s.i] == ' ' {
		s.i++
	}
}

func (s *sfScanner) skipOWS() {
	for !s.done() && (s.s[s.i] == ' ' || s.s[s.i] == '\t') {
		s.i++
	}
}

// member parses an Item or an Inner List with its parameters, and reports
// whether it is an Item whose value is a String (named), with its r and t.
func (s *sfScanner) member() (m rateLimitMember, named, ok bool) {
	m = rateLimitMember{r: -1, t: -1}
	if s.peek() == '(' {
		return m, false, s.innerList()
	}
	kind, _, ok := s.bareItem()
	if !ok {
		return m, false, false
	}
	return m, kind == sfString, s.params(&m)
}

// innerList parses an Inner List, from its '(' to its ')', and its
// parameters: Items separated by spaces. An Inner List inside one is not
// an Item, so a '(' there fails.
func (s *sfScanner) innerList() bool {
	s.i++ // '('
	for {
		s.skipSP()
		if s.peek() == ')' {
			s.i++
			return s.params(nil)
		}
		if _, _, ok := s.bareItem(); !ok || !s.params(nil) {
			return false
		}
		if c := s.peek(); c != ' ' && c != ')' {
			return false
		}
	}
}

// params parses the parameters after an Item or Inner List, ";key" or
// ";key=value" each, and records r and t in m if m is not nil. RFC 9651
// keeps the last of repeated keys; so does params.
func (s *sfScanner) params(m *rateLimitMember) bool {
	for s.peek() == ';' {
		s.i++
		s.skipSP()
		start := s.i
		if c := s.peek(); !isLower(c) && c != '*' {
			return false
		}
		for s.i++; !s.done() && isKeyChar(s.s[s.i]); s.i++ {
		}
		key := s.s[start:s.i]
		n := int64(-1) // a parameter without a value is the Boolean true
		if s.peek() == '=' {
			s.i++
			kind, v, ok := s.bareItem()
			if !ok {
				return false
			}
			if kind == sfInteger && v >= 0 {
				n = v
			}
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

// bareItem parses one bare item and returns its kind, and the value of an
// Integer.
func (s *sfScanner) bareItem() (kind sfKind, n int64, ok bool) {
	switch c := s.peek(); {
	case c == '"':
		return sfString, 0, s.str()
	case c == '-' || isDigit(c):
		return s.number()
	case isAlpha(c) || c == '*':
		for s.i++; !s.done() && isTokenChar(s.s[s.i]); s.i++ {
		}
		return sfOther, 0, true
	case c == ':':
		return sfOther, 0, s.byteSequence()
	case c == '?':
		s.i++
		if c := s.peek(); c != '0' && c != '1' {
			return sfOther, 0, false
		}
		s.i++
		return sfOther, 0, true
	case c == '@': // a Date: an Integer of seconds
		s.i++
		kind, _, ok := s.number()
		return sfOther, 0, ok && kind == sfInteger
	case c == '%':
		return sfOther, 0, s.displayString()
	}
	return sfOther, 0, false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a '.', 1 to 3 digits), with an optional '-'.
func (s *sfScanner) number() (kind sfKind, n int64, ok bool) {
	neg := s.peek() == '-'
	if neg {
		s.i++
	}
	if !isDigit(s.peek()) {
		return sfOther, 0, false
	}
	start, dot := s.i, -1
	for ; !s.done(); s.i++ {
		c := s.s[s.i]
		if isDigit(c) {
			if size := s.i + 1 - start; dot < 0 && size > 15 || size > 16 {
				return sfOther, 0, false
			}
			if dot < 0 {
				n = n*10 + int64(c-'0')
			}
			continue
		}
		if c == '.' && dot < 0 {
			if s.i-start > 12 {
				return sfOther, 0, false
			}
			dot = s.i
			continue
		}
		break
	}
	if dot >= 0 {
		decimals := s.i - dot - 1
		return sfOther, 0, decimals >= 1 && decimals <= 3
	}
	if neg {
		n = -n
	}
	return sfInteger, n, true
}

// str parses a String: printable ASCII between quotes, with '"' and '\'
// escaped by '\' and nothing else escaped.
func (s *sfScanner) str() bool {
	for s.i++; !s.done(); s.i++ {
		switch c := s.s[s.i]; {
		case c == '\\':
			s.i++
			if c := s.peek(); c != '"' && c != '\\' {
				return false
			}
		case c == '"':
			s.i++
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// byteSequence parses a Byte Sequence: base64 between colons.
func (s *sfScanner) byteSequence() bool {
	s.i++ // ':'
	start := s.i
	for ; !s.done(); s.i++ {
		switch c := s.s[s.i]; {
		case c == ':':
			b64 := s.s[start:s.i]
			s.i++
			return paddedBase64(b64)
		case !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=':
			return false
		}
	}
	return false
}

// paddedBase64 reports whether b, of base64 characters and '=' only,
// decodes as encoding/base64's StdEncoding decodes: whole quanta of 4, and
// '=' only as the last one or two of the last. RFC 9651 lets a parser
// accept missing padding (SHOULD NOT fail); it lets one fail, too, and
// strict parsers do.
func paddedBase64(b string) bool {
	if len(b)%4 != 0 {
		return false
	}
	p := strings.IndexByte(b, '=')
	if p < 0 {
		return true
	}
	return p >= len(b)-2 && p%4 >= 2 && strings.Trim(b[p:], "=") == ""
}

// displayString parses a Display String: %"...", printable ASCII with
// %xx (lowercase hex) escapes, which together are valid UTF-8. It checks
// the UTF-8 a rune at a time, in a buffer of at most utf8.UTFMax bytes.
func (s *sfScanner) displayString() bool {
	if !strings.HasPrefix(s.s[s.i:], `%"`) {
		return false
	}
	var pending [utf8.UTFMax]byte
	n := 0
	for s.i += 2; !s.done(); {
		c := s.s[s.i]
		s.i++
		switch {
		case c < 0x20 || c > 0x7e:
			return false
		case c == '"':
			return n == 0 // no rune cut short at the end
		case c == '%':
			if len(s.s)-s.i < 2 {
				return false
			}
			hi, ok1 := lowerHex(s.s[s.i])
			lo, ok2 := lowerHex(s.s[s.i+1])
			if !ok1 || !ok2 {
				return false
			}
			s.i += 2
			c = hi<<4 | lo
		}
		pending[n] = c
		n++
		if utf8.FullRune(pending[:n]) {
			// The first n that makes a full rune: a valid one of n
			// bytes, or an invalid one, which decodes as an error of 1.
			if r, size := utf8.DecodeRune(pending[:n]); r == utf8.RuneError && size == 1 {
				return false
			}
			n = 0
		}
	}
	return false
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlpha(c byte) bool { return isLower(c) || 'A' <= c && c <= 'Z' }

// isKeyChar reports whether c may follow the first character of a key.
func isKeyChar(c byte) bool {
	return isLower(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

// isTokenChar reports whether c may follow the first character of a Token:
// an RFC 9110 tchar, ':' or '/'.
func isTokenChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
