package keylimit_test

import (
	"context"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// A context carries one of the three criticalities; any other value is
// Default, as is a context without one.
func TestCriticalityOf(t *testing.T) {
	ctx := context.Background()
	require.Equal(t, keylimit.Default, keylimit.CriticalityOf(ctx))
	require.Equal(t, keylimit.Sheddable, keylimit.CriticalityOf(keylimit.WithCriticality(ctx, keylimit.Sheddable)))
	require.Equal(t, keylimit.Default, keylimit.CriticalityOf(keylimit.WithCriticality(ctx, 7)))
	var zero keylimit.Criticality
	require.Equal(t, keylimit.Default, zero)
}
