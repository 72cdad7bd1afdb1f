package quota_test

import (
	"fmt"
	"testing"

	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// A key function's error that wraps ErrNoKey is one, and keeps its text.
func TestErrNoKey(t *testing.T) {
	err := fmt.Errorf("myproxy: no X-User header: %w", quota.ErrNoKey)
	require.ErrorIs(t, err, quota.ErrNoKey)
	require.EqualError(t, err, "myproxy: no X-User header: quota: the request carries no key")
	require.NotErrorIs(t, fmt.Errorf("myproxy: no X-User header"), quota.ErrNoKey)
}
