package quota

// ConfigError is the error of New for a configuration that cannot work
// (a Policy from Bucket with an invalid Limit among them). Its text is
// "quota: " and what is wrong. errors.Unwrap returns what is wrong alone,
// without a package's name, for a package that builds a Decider from a
// configuration of its own to say as its own (httplimit.New says
// "httplimit: " and it); errors.Is and errors.As see through it to a
// cause, such as keylimit's error for an invalid Limit.
type ConfigError struct {
	reason error
}

func (e *ConfigError) Error() string { return "quota: " + e.reason.Error() }

func (e *ConfigError) Unwrap() error { return e.reason }

// ErrNoKey is the error of a request or a call that does not carry what its
// key needs: a missing header or metadata, a forwarded address that cannot
// be read. errors.Is(err, ErrNoKey) holds for every error that wraps it or
// any other error NoKey returns, such as httplimit.ErrNoKey and
// grpclimit.ErrNoKey: an adapter answers them as the client's fault.
var ErrNoKey = NoKey("quota: the request carries no key")

// NoKey returns a new error with the text text that errors.Is matches with
// ErrNoKey and with every other error NoKey returns, and with nothing else:
// the ErrNoKey of a package that keys requests, in its own words.
func NoKey(text string) error { return &noKey{text} }

// noKey is an error of NoKey. It is a pointer, so that each is its own
// value, and they are one kind by their Is.
type noKey struct{ text string }

func (e *noKey) Error() string { return e.text }

// Is reports whether target is an error of NoKey.
func (e *noKey) Is(target error) bool {
	_, ok := target.(*noKey)
	return ok
}
