package httplimit

import "strconv"

// maxQuoted is the most bytes of a value from a request or an answer that
// an error message quotes: enough to recognise the value, never enough for
// a 900 KB header to come back as a 4.5 MB body (escaped, a byte may take
// four).
const maxQuoted = 64

// quote returns s quoted as %q quotes it, cut after its first maxQuoted
// bytes, saying how long it was: "for=\"xyz"... (921600 bytes).
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxQuoted]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}
