package grpclimit

import (
	"context"
	"fmt"
	"strings"

	"github.com/keylimit/keylimit/internal/joinkey"
	"github.com/keylimit/keylimit/internal/nokey"
	"google.golang.org/grpc/metadata"
)

// KeyFunc names the client a call counts against, from the call's context
// (its peer, its incoming metadata, values an authentication interceptor put
// there) and its full method name ("/grpc.health.v1.Health/Check").
//
// A KeyFunc that cannot key a call returns an error, never a key shared by
// every such call: the interceptor then refuses the call without counting it
// (see Config.Error). Wrap quota.ErrNoKey when the call lacks what the key needs,
// so that the client is told (InvalidArgument); any other error, and an
// empty key without one, is the server's (Internal).
//
// A Client's Key is a KeyFunc too: there it names what a call waits under,
// from the client's side of the call (its outgoing context, its method).
type KeyFunc func(ctx context.Context, method string) (string, error)

// errNoKey is wrapped by the package's KeyFuncs' errors for calls that do
// not carry what their key needs: quota.ErrNoKey's kind, in our words.
var errNoKey = nokey.New("grpclimit: the call carries no key")

// Method keys calls by their full method name, "/package.Service/Method":
// every call to one method shares its limit, whoever makes it. Join it with
// a client key for a limit per client and method.
func Method(_ context.Context, method string) (string, error) { return method, nil }

// Metadata returns a KeyFunc that keys calls by the first value of the
// incoming metadata key name, such as "x-api-key" (metadata keys are
// lower-case; name is lower-cased). A call without it, or with an empty
// value, has no key (quota.ErrNoKey).
//
// Metadata is whatever the client sends: key by a value only when it is
// checked (an API key your server knows, a user an authenticating proxy
// set), or every new value buys a client a fresh quota.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	missing := fmt.Errorf("%w: no %s metadata", errNoKey, name)
	return func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", missing
	}
}

// Join returns a KeyFunc whose key combines the keys of all the given
// KeyFuncs: Join(ClientIP{}.Key, Method) counts each client on each method
// apart. The key is their keys joined by '|', each with '|' and '\'
// escaped, as httplimit.Join joins them, so that distinct combinations
// never make one key; a call that one of them cannot key has that one's
// error, and one that one of them keys "" is the server's error (Internal).
//
// Join panics if keys is empty or holds a nil, a programming error.
func Join(keys ...KeyFunc) KeyFunc {
	if len(keys) == 0 {
		panic("grpclimit: Join needs at least one KeyFunc")
	}
	for i, k := range keys {
		if k == nil {
			panic(fmt.Sprintf("grpclimit: Join: KeyFunc %d is nil", i))
		}
	}
	keys = append([]KeyFunc(nil), keys...)
	return func(ctx context.Context, method string) (string, error) {
		return joinkey.Join(keys, func(k KeyFunc) (string, error) { return k(ctx, method) }, errEmptyKey)
	}
}
