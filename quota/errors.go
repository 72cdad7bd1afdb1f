package quota

import "github.com/keylimit/keylimit/internal/nokey"

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
// be read. A key function (httplimit's, grpclimit's, your own) wraps it,
// and errors.Is(err, ErrNoKey) holds for every error that does, and for
// httplimit's and grpclimit's own, which say so in their package's words:
// an adapter answers them as the client's fault.
var ErrNoKey = nokey.New("quota: the request carries no key")
