package quota

import (
	"errors"
	"fmt"
	"strconv"
)

// checkName reports whether s can name a policy: a non-empty RFC 9651
// String, which holds printable ASCII only.
func checkName(s string) error {
	if s == "" {
		return errors.New("a policy has no name")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("policy name %q has a byte %#x a Structured Field String cannot hold (printable ASCII only)", s, c)
		}
	}
	return nil
}

// appendSFString appends s, checked by checkName, as an RFC 9651 String:
// quoted, with '"' and '\' escaped.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// appendParam appends the parameter ";key=n" with n an Integer.
func appendParam(b []byte, key string, n int64) []byte {
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, n, 10)
}
