package ratefields_test

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/stretchr/testify/require"
)

// Retry-After is whole seconds rounded up and never 0; none for a request
// that can never pass. The legacy fields are q, r (at most q) and t of the
// binding policy.
func TestRetryAfterAndLegacy(t *testing.T) {
	for _, tc := range []struct {
		retryAfter time.Duration
		want       int64
		ok         bool
	}{
		{0, 1, true},
		{time.Nanosecond, 1, true},
		{time.Second, 1, true},
		{time.Second + 1, 2, true},
		{20 * time.Second, 20, true},
		{keylimit.InfDuration, 0, false},
	} {
		secs, ok := ratefields.RetryAfterSeconds(keylimit.Result{RetryAfter: tc.retryAfter})
		require.Equal(t, tc.want, secs, "%v", tc.retryAfter)
		require.Equal(t, tc.ok, ok, "%v", tc.retryAfter)
	}
	limit, remaining, reset := ratefields.Legacy(keylimit.Result{Limit: 10, Remaining: 12, ResetAfter: 2500 * time.Millisecond})
	require.Equal(t, []int64{10, 10, 3}, []int64{limit, remaining, reset})
}
