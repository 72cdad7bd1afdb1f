// Package nokey is the kind of error quota.ErrNoKey is: one error per
// package that keys requests, each in its package's words, all matched by
// errors.Is with one another, so that a user wraps quota.ErrNoKey alone.
package nokey

// New returns a new error with the text text that errors.Is matches with
// every other error New returns, and with nothing else.
func New(text string) error { return &noKey{text} }

// noKey is an error of New. It is a pointer, so that each is its own
// value, and they are one kind by their Is.
type noKey struct{ text string }

func (e *noKey) Error() string { return e.text }

// Is reports whether target is an error of New.
func (e *noKey) Is(target error) bool {
	_, ok := target.(*noKey)
	return ok
}
