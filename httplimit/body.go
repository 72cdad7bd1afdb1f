package httplimit

import (
	"encoding/json"
	"strconv"
	"strings"
)

// appendJSON appends b as json.Marshal writes it, byte for byte, without
// reflection: a refusal is answered in a few hundred nanoseconds, of which
// encoding/json took half (and four allocations). TestBodyJSON holds the two
// to each other on every field of body.
func (b *body) appendJSON(out []byte) []byte {
	open := len(out)
	return b.appendMembers(append(out, '{'), open)
}

// appendMembers appends the members of b to the object opened at out[open],
// and closes it: after the members of another body, which come before b's
// in body's order, whose object was opened there (see heads).
func (b *body) appendMembers(out []byte, open int) []byte {
	if b.Type != "" {
		out = appendJSONString(appendMember(out, open, `"type":`), b.Type)
	}
	if b.Title != "" {
		out = appendJSONString(appendMember(out, open, `"title":`), b.Title)
	}
	if b.Status != 0 {
		out = strconv.AppendInt(appendMember(out, open, `"status":`), int64(b.Status), 10)
	}
	if b.Detail != "" {
		out = appendJSONString(appendMember(out, open, `"detail":`), b.Detail)
	}
	if len(b.ViolatedPolicies) > 0 {
		out = append(appendMember(out, open, `"violated-policies":`), '[')
		for i, name := range b.ViolatedPolicies {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, name)
		}
		out = append(out, ']')
	}
	if b.Error != "" {
		out = appendJSONString(appendMember(out, open, `"error":`), b.Error)
	}
	if b.RetryAfterSeconds != 0 {
		out = strconv.AppendInt(appendMember(out, open, `"retry_after_seconds":`), b.RetryAfterSeconds, 10)
	}
	if b.Policy != "" {
		out = appendJSONString(appendMember(out, open, `"policy":`), b.Policy)
	}
	if b.Limit != nil {
		out = strconv.AppendInt(appendMember(out, open, `"limit":`), int64(*b.Limit), 10)
	}
	if b.Remaining != nil {
		out = strconv.AppendInt(appendMember(out, open, `"remaining":`), int64(*b.Remaining), 10)
	}
	return append(out, '}')
}

// appendMember appends the name of an object's member, quoted and with
// its colon (`"name":`, written so once, not byte by byte), after a comma
// unless it is the first of the object opened at out[open].
func appendMember(out []byte, open int, quoted string) []byte {
	if len(out) > open+1 {
		out = append(out, ',')
	}
	return append(out, quoted...)
}

// plainJSON says which bytes json.Marshal writes as themselves in a
// string: printable ASCII but '"', '\' and the HTML-escaped '<', '>', '&'.
var plainJSON = func() (plain [256]bool) {
	for c := ' '; c <= '~'; c++ {
		plain[c] = !strings.ContainsRune(`"\<>&`, c)
	}
	return plain
}()

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
// A string of printable ASCII that JSON and encoding/json's HTML escaping
// leave alone (our messages, policy names) is copied between quotes; any
// other, which may hold what a client sent, is json.Marshal's.
func appendJSONString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainJSON[s[i]] {
			// A copy, so that s does not escape: body's fields point at
			// its caller's stack.
			q, _ := json.Marshal(strings.Clone(s)) // a string never fails
			return append(out, q...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}
