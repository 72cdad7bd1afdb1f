package redislimit_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// TestSameMethodsAsInMemory: each Redis limiter type has every method of its
// in-memory sibling (keys are strings), with the same signature, so that one
// program serves both; the methods only the Redis type has are the ones
// about Redis, named here: the context variants (a Redis call takes one),
// and Ping and StateKey (the server and its keys). A Penalty on Redis is
// keylimit's own (NewPenalty returns a *keylimit.Penalty[string]), so it
// has no row here.
func TestSameMethodsAsInMemory(t *testing.T) {
	contexts := []string{"AdmitContext", "PeekContext", "RefundContext", "TakeContext"}
	rate := append([]string{"Ping", "StateKey"}, contexts...)
	for _, tc := range []struct {
		memory, redis reflect.Type
		redisOnly     []string
	}{
		{reflect.TypeFor[*keylimit.TokenBucket[string]](), reflect.TypeFor[*redislimit.TokenBucket](), rate},
		{reflect.TypeFor[*keylimit.FixedWindow[string]](), reflect.TypeFor[*redislimit.FixedWindow](), rate},
		{reflect.TypeFor[*keylimit.SlidingWindow[string]](), reflect.TypeFor[*redislimit.SlidingWindow](), rate},
		{reflect.TypeFor[*keylimit.Concurrency[string]](), reflect.TypeFor[*redislimit.Concurrency](),
			[]string{"PeekContext", "Ping", "StateKey", "TryAcquireContext"}},
	} {
		for i := range tc.memory.NumMethod() {
			m := tc.memory.Method(i)
			r, ok := tc.redis.MethodByName(m.Name)
			if !ok {
				t.Errorf("%v has %s, %v has not", tc.memory, m.Name, tc.redis)
				continue
			}
			if got, want := signature(r.Type), signature(m.Type); got != want {
				t.Errorf("%v.%s is %s, %v's is %s", tc.redis, m.Name, got, tc.memory, want)
			}
		}
		for i := range tc.redis.NumMethod() {
			name := tc.redis.Method(i).Name
			if _, ok := tc.memory.MethodByName(name); !ok && !slices.Contains(tc.redisOnly, name) {
				t.Errorf("%v has %s, which %v has not and is not about Redis", tc.redis, name, tc.memory)
			}
		}
		for _, name := range tc.redisOnly {
			if _, ok := tc.redis.MethodByName(name); !ok {
				t.Errorf("%v has no %s, listed as its own", tc.redis, name)
			}
		}
	}
}

// signature is a method's type without its receiver.
func signature(f reflect.Type) string {
	in := make([]reflect.Type, 0, f.NumIn()-1)
	for i := 1; i < f.NumIn(); i++ {
		in = append(in, f.In(i))
	}
	out := make([]reflect.Type, 0, f.NumOut())
	for i := range f.NumOut() {
		out = append(out, f.Out(i))
	}
	return reflect.FuncOf(in, out, f.IsVariadic()).String()
}
