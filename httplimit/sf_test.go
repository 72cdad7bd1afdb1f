package httplimit_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A strict parser of RFC 9651 Structured Field lists, for checking the
// fields the middleware sends. It accepts what the middleware may send,
// Items whose bare items are Integers, Strings or Tokens, with parameters,
// and fails on anything else, including what RFC 9651 allows but we never
// send (Decimals, Inner Lists, Byte Sequences, Booleans, Dates, Display
// Strings) and duplicate parameter keys, which RFC 9651 resolves by
// keeping the last but which would mean a bug here.

// sfItem is one list member.
type sfItem struct {
	value  any // string for a String, sfToken for a Token, int64 for an Integer
	params []sfParam
}

type sfToken string

type sfParam struct {
	key   string
	value any
}

// param returns the value of the parameter key, or nil.
func (it sfItem) param(key string) any {
	for _, p := range it.params {
		if p.key == key {
			return p.value
		}
	}
	return nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) fail(format string, args ...any) error {
	return fmt.Errorf("sf: at %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) more() bool { return p.i < len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

// parseSFList parses a List field value (RFC 9651, Section 4.2.1).
func parseSFList(field string) ([]sfItem, error) {
	p := &sfParser{s: field}
	for p.more() && p.peek() == ' ' {
		p.i++
	}
	var items []sfItem
	for p.more() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if !p.more() {
			return items, nil
		}
		if p.peek() != ',' {
			return nil, p.fail("expected ',' after a member")
		}
		p.i++
		p.ows()
		if !p.more() {
			return nil, p.fail("trailing comma")
		}
	}
	return items, nil
}

func (p *sfParser) ows() {
	for p.more() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	for p.more() && p.peek() == ';' {
		p.i++
		for p.more() && p.peek() == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var value any = true
		if p.more() && p.peek() == '=' {
			p.i++
			if value, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		if it.param(key) != nil {
			return sfItem{}, p.fail("duplicate parameter %q", key)
		}
		it.params = append(it.params, sfParam{key, value})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if !p.more() || !(isLower(p.peek()) || p.peek() == '*') {
		return "", p.fail("a key starts with a lowercase letter or '*'")
	}
	for p.more() && (isLower(p.peek()) || isDigit(p.peek()) || strings.IndexByte("_-.*", p.peek()) >= 0) {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if !p.more() {
		return nil, p.fail("expected a bare item")
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.integer()
	case c == '"':
		return p.str()
	case isAlpha(c) || c == '*':
		return p.token(), nil
	default:
		return nil, p.fail("bare item starting with %q is not an Integer, String or Token", c)
	}
}

func (p *sfParser) integer() (int64, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits := p.i
	for p.more() && isDigit(p.peek()) {
		p.i++
	}
	switch n := p.i - digits; {
	case n == 0:
		return 0, p.fail("an Integer has no digits")
	case n > 15:
		return 0, p.fail("an Integer has more than 15 digits")
	}
	if p.more() && p.peek() == '.' {
		return 0, p.fail("a Decimal, never sent")
	}
	return strconv.ParseInt(p.s[start:p.i], 10, 64)
}

func (p *sfParser) str() (string, error) {
	p.i++ // '"'
	var b strings.Builder
	for p.more() {
		c := p.peek()
		p.i++
		switch {
		case c == '\\':
			if !p.more() || (p.peek() != '"' && p.peek() != '\\') {
				return "", p.fail("bad escape in a String")
			}
			b.WriteByte(p.peek())
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.fail("byte %#x in a String", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", p.fail("unterminated String")
}

func (p *sfParser) token() sfToken {
	start := p.i
	p.i++
	for p.more() && (isTchar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
		p.i++
	}
	return sfToken(p.s[start:p.i])
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlpha(c byte) bool { return isLower(c) || 'A' <= c && c <= 'Z' }
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// TestSFParser pins the parser: a check built on a parser that accepts
// anything would pass whatever the middleware sent.
func TestSFParser(t *testing.T) {
	good := []struct {
		in   string
		want string // the items as fmt prints them
	}{
		{`"minute";q=10;w=60`, `[{minute [{q 10} {w 60}]}]`},
		{`  "a";r=0;t=42, "b\"\\c";r=3`, `[{a [{r 0} {t 42}]} {b"\c [{r 3}]}]`},
		{`tok:x/y;a, "s"`, `[{tok:x/y [{a true}]} {s []}]`},
		{`-5;k="v"`, `[{-5 [{k v}]}]`},
		{`"x";  a=1`, `[{x [{a 1}]}]`},
		{`"x",	"y"`, `[{x []} {y []}]`},
		{``, `[]`},
	}
	for _, c := range good {
		items, err := parseSFList(c.in)
		require.NoError(t, err, "%q", c.in)
		require.Equal(t, c.want, fmt.Sprint(items), "%q", c.in)
	}
	bad := []string{
		`"minute";q=10,`,              // trailing comma
		`"minute" "hour"`,             // no comma
		`"minute";Q=10`,               // uppercase key
		`"minute";q=1.5`,              // Decimal
		`"minute";q=1234567890123456`, // 16 digits
		`"unterminated`,               // no closing quote
		`"bad\escape"`,                // escape of a letter
		`"tab	inside"`,                // control byte
		`"é"`,                         // non-ASCII
		`minute;q=`,                   // no value
		`"a";q=1;q=2`,                 // duplicate key
		`("a" "b")`,                   // Inner List
		`:AAA=:`,                      // Byte Sequence
		`?1`,                          // Boolean
		`"a" ;q=1`,                    // space before ';'
		`"a";q=1 x`,                   // junk after the item
	}
	for _, in := range bad {
		items, err := parseSFList(in)
		require.Error(t, err, "%q parsed as %v", in, items)
		require.NotErrorIs(t, err, strconv.ErrSyntax, "%q: the parser's own error, not strconv's", in)
	}
}
