package keylimit_test

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit keylimit.Limit
		err   string // substring of the error; "" means valid
	}{
		{"per second", keylimit.PerSecond(10), ""},
		{"per minute with burst", keylimit.PerMinute(10).WithBurst(3), ""},
		{"per hour", keylimit.PerHour(500), ""},
		{"one per nanosecond", keylimit.Per(1, time.Nanosecond), ""},
		{"zero value", keylimit.Limit{}, "keylimit: events 0 is below 1"},
		{"negative events", keylimit.Per(-1, time.Second), "keylimit: events -1 is below 1"},
		{"zero period", keylimit.Per(1, 0), "keylimit: period 0s is not positive"},
		{"negative period", keylimit.Per(1, -time.Second), "keylimit: period -1s is not positive"},
		{"WithBurst(0)", keylimit.PerSecond(1).WithBurst(0), "keylimit: burst 0 is below 1"},
		{"negative burst", keylimit.PerSecond(1).WithBurst(-3), "keylimit: burst -3 is below 1"},
		{"negative burst field", keylimit.Limit{Events: 1, Period: time.Second, Burst: -1}, "keylimit: burst -1 is below 1"},
		{"interval rounds to 0", keylimit.Per(10, 5*time.Nanosecond), "keylimit: 10 events per 5ns is more than one per nanosecond"},
		{"burst span overflows", keylimit.PerHour(1).WithBurst(1 << 40), "spans more than"},
		{"period too long", keylimit.Per(1, 1<<62), "is longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			if tt.err == "" {
				require.NoError(t, err)
				_, err = keylimit.NewTokenBucket[string](tt.limit)
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.err)
			lim, err := keylimit.NewTokenBucket[string](tt.limit)
			require.ErrorContains(t, err, tt.err, "the constructor reports the same error")
			require.Nil(t, lim)
		})
	}
}

func TestLimitInterval(t *testing.T) {
	tests := []struct {
		limit keylimit.Limit
		want  time.Duration
	}{
		{keylimit.PerSecond(10), 100 * time.Millisecond},
		{keylimit.PerMinute(1), time.Minute},
		{keylimit.PerHour(500), 7200 * time.Millisecond},
		// Rounded up, so that the bucket never refills faster than asked.
		{keylimit.PerSecond(3), 333333334 * time.Nanosecond},
		{keylimit.Limit{}, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.limit.Interval(), "%v", tt.limit)
	}
}

func TestLimitBurstAndString(t *testing.T) {
	require.Equal(t, 10, keylimit.PerSecond(10).BurstSize(), "Burst 0 means Events")
	require.Equal(t, 3, keylimit.PerSecond(10).WithBurst(3).BurstSize())
	require.Equal(t, "10/1s", keylimit.PerSecond(10).String())
	require.Equal(t, "1/1s burst 5", keylimit.PerSecond(1).WithBurst(5).String())
	require.Equal(t, keylimit.Limit{Events: 7, Period: time.Minute}, keylimit.PerMinute(7))
}
