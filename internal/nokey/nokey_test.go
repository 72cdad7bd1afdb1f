package nokey_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keylimit/keylimit/internal/nokey"
	"github.com/stretchr/testify/require"
)

// The errors of New are one kind: each keeps its own text, and errors.Is
// matches any of them, wrapped or not, with every other; no other error.
func TestNew(t *testing.T) {
	base, http, grpc := nokey.New("quota: no key"), nokey.New("http: no key"), nokey.New("grpc: no key")
	require.EqualError(t, http, "http: no key")
	wrapped := fmt.Errorf("%w: no X-User header", http)
	for _, target := range []error{base, http, grpc} {
		require.ErrorIs(t, http, target)
		require.ErrorIs(t, wrapped, target)
	}
	other := errors.New("http: no key")
	require.NotErrorIs(t, other, base, "an error of the same text is not of the kind")
	require.NotErrorIs(t, base, other)
	require.NotErrorIs(t, fmt.Errorf("%w", other), grpc)
}
