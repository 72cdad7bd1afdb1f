package quota

import "github.com/keylimit/keylimit/internal/nokey"

// ErrNoKey is the error of a request or a call that does not carry what its
// key needs: a missing header or metadata, a forwarded address that cannot
// be read. A key function (httplimit's, grpclimit's, your own) wraps it,
// and errors.Is(err, ErrNoKey) holds for every error that does, and for
// httplimit's and grpclimit's own, which say so in their package's words:
// an adapter answers them as the client's fault.
var ErrNoKey = nokey.New("quota: the request carries no key")
