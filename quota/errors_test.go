package quota_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// The errors of NoKey are one kind: each keeps its own text, and errors.Is
// matches any of them, wrapped or not, with ErrNoKey and every other; no
// other error.
func TestNoKey(t *testing.T) {
	http, grpc := quota.NoKey("http: no key"), quota.NoKey("grpc: no key")
	require.EqualError(t, http, "http: no key")
	wrapped := fmt.Errorf("%w: no X-User header", http)
	for _, target := range []error{quota.ErrNoKey, http, grpc} {
		require.ErrorIs(t, http, target)
		require.ErrorIs(t, wrapped, target)
	}
	other := errors.New("http: no key")
	require.NotErrorIs(t, other, quota.ErrNoKey, "an error of the same text is not of the kind")
	require.NotErrorIs(t, quota.ErrNoKey, other)
	require.NotErrorIs(t, fmt.Errorf("%w", other), grpc)
}
