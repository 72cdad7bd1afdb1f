package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
)

// After an admitted r=0 from a PerMinute(10) bucket, the Transport pauses
// the host for that answer's t: 6 s, the bucket's next token, which is the
// server's real wait. Before issue 23 t was 60, the minute until the
// bucket is whole, and a call with a 20 s deadline failed. The next call
// is sent at 6 s, within the deadline, and admitted.
func TestTransportPauseIsTheServersWait(t *testing.T) {
	mock := clock.NewMock()
	srv := limitedServer(t, mock, keylimit.PerMinute(10))
	c := &http.Client{Transport: &httplimit.Transport{Clock: autoClock{mock}}}
	for i := range 10 {
		resp, err := fetch(c, context.Background(), srv.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "call %d", i)
		if i == 9 {
			require.Equal(t, `"second";r=0;t=6`, resp.Header.Get("RateLimit"))
		}
	}
	ctx, cancel := mock.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := fetch(c, ctx, srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the call after the pause")
	seen := srv.seen()
	require.Len(t, seen, 11, "no call was refused")
	require.Equal(t, 6*time.Second, seen[10].at, "sent when the next token came")
	require.Equal(t, http.StatusOK, seen[10].status)
}
