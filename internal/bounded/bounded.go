// Package bounded quotes values from requests and answers in error
// messages, cut to a length that recognises them without repeating a huge
// one: httplimit's and grpclimit's errors quote headers, metadata and keys
// a client chose.
package bounded

import "strconv"

// MaxQuoted is the most bytes of a value from a request or an answer that
// an error message quotes: enough to recognise the value, never enough for
// a 900 KB header to come back as a 4.5 MB body (escaped, a byte may take
// four).
const MaxQuoted = 64

// Quote returns s quoted as %q quotes it, cut after its first MaxQuoted
// bytes, saying how long it was: "for=\"xyz"... (921600 bytes).
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:MaxQuoted]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}
