package httplimit

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// every returns a body with each of its fields set, by reflection, so that
// a field added to body is compared without a change here: strings to s,
// integers to n, pointers to integers to &n, slices of strings to s and
// s+"2".
func every(t *testing.T, s string, n int) body {
	var b body
	v := reflect.ValueOf(&b).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(s)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(n))
		case reflect.Slice: // of strings
			f.Set(reflect.ValueOf([]string{s, s + "2"}))
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			p.Elem().SetInt(int64(n))
			f.Set(p)
		default:
			t.Fatalf("body.%s is a %s: teach every to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	return b
}

// The default answers' JSON is json.Marshal's, byte for byte, with every
// field set or none, each alone, and strings that need escaping.
func TestBodyJSON(t *testing.T) {
	full := every(t, "x", 7)
	bodies := []body{{}, full, every(t, `a "quoted" <b> & c\d`, -1), every(t, "tab\there\x00\u2028é\xff", 0)}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		var one body
		reflect.ValueOf(&one).Elem().Field(i).Set(v.Field(i))
		bodies = append(bodies, one)
	}
	for _, b := range bodies {
		want, err := json.Marshal(b)
		require.NoError(t, err)
		require.Equal(t, string(want), string(b.appendJSON(nil)))
	}
	require.Equal(t, `prefix{"error":"rate limit exceeded","limit":10,"remaining":0}`,
		string((&body{Error: "rate limit exceeded", Limit: new(10), Remaining: new(0)}).appendJSON([]byte("prefix"))))
}

// FuzzBodyJSON: whatever the strings and numbers, appendJSON writes what
// json.Marshal does.
func FuzzBodyJSON(f *testing.F) {
	f.Add("Too Many Requests", "rate limit exceeded", "minute", 429, int64(30), 10, 0, true)
	f.Add("", "policy \"a<b>\" can never pass", "\xff\u2029", 0, int64(0), -3, 5, false)
	f.Fuzz(func(t *testing.T, title, msg, policy string, status int, retry int64, limit, remaining int, pointers bool) {
		b := body{Type: title, Title: title, Status: status, Detail: msg, Error: msg, RetryAfterSeconds: retry, Policy: policy}
		if pointers {
			b.Limit, b.Remaining = &limit, &remaining
			b.ViolatedPolicies = []string{policy, msg}
		}
		want, err := json.Marshal(b)
		require.NoError(t, err)
		if got := b.appendJSON(nil); string(got) != string(want) {
			t.Fatalf("appendJSON wrote\n%s\njson.Marshal\n%s", got, want)
		}
	})
}

// A refusal's body is its head, written once, then the members of the
// request: byte for byte the body appendJSON and json.Marshal write whole,
// with no policy violated or several, names that need escaping, and every
// number.
func TestHeads(t *testing.T) {
	for i, want := range []body{
		headQuotaExceeded:       {Type: problemQuotaExceeded, Title: "Quota Exceeded", Status: 429, Detail: "rate limit exceeded"},
		headQuotaExceededJSON:   {Error: "rate limit exceeded"},
		headReducedCapacity:     {Type: problemReducedCapacity, Title: "Temporary Reduced Capacity", Status: 503, Detail: "the rate limiter is tracking as many clients as it can: try again later"},
		headReducedCapacityJSON: {Error: "the rate limiter is tracking as many clients as it can: try again later"},
	} {
		for _, tail := range []body{
			{},
			{Policy: "minute", Limit: new(10), Remaining: new(0), RetryAfterSeconds: 20},
			{ViolatedPolicies: []string{"a\"<b>", "c"}, Policy: "a\"<b>", Limit: new(0), Remaining: new(-1)},
		} {
			if want.Error != "" {
				tail.ViolatedPolicies = nil // a member before "error": never in a JSON body (see deny)
			}
			whole := want
			whole.ViolatedPolicies, whole.RetryAfterSeconds, whole.Policy, whole.Limit, whole.Remaining =
				tail.ViolatedPolicies, tail.RetryAfterSeconds, tail.Policy, tail.Limit, tail.Remaining
			marshalled, err := json.Marshal(whole)
			require.NoError(t, err)
			got := tail.appendMembers(append([]byte(nil), heads[i].json...), 0)
			require.Equal(t, string(marshalled), string(got), "head %d", i)
		}
	}
}
