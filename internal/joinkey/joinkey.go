// Package joinkey joins the keys of several parts of a request into one,
// as httplimit.Join and grpclimit.Join do, so that distinct combinations
// never make one key.
package joinkey

import "strings"

// Join returns the keys keyOf gives each of parts, joined by '|', each with
// '|' and '\' escaped by a '\'. It returns the first error keyOf returns,
// or empty if keyOf returns "" for one: an empty part would make the key of
// two combinations one.
func Join[P any](parts []P, keyOf func(P) (string, error), empty error) (string, error) {
	var buf [128]byte
	b := buf[:0]
	for i, p := range parts {
		part, err := keyOf(p)
		if err != nil {
			return "", err
		}
		if part == "" {
			return "", empty
		}
		if i > 0 {
			b = append(b, '|')
		}
		b = appendEscaped(b, part)
	}
	return string(b), nil
}

// appendEscaped appends s to b with each '|' and '\' escaped by a '\'.
func appendEscaped(b []byte, s string) []byte {
	if !strings.ContainsAny(s, `|\`) {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '|' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}
