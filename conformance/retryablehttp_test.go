package conformance

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/stretchr/testify/require"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/keylimit/keylimit/quota"
)

// TestRetryableHTTP runs hashicorp/go-retryablehttp, a client many Go
// programs retry with, against httplimit's middleware at 5 requests a
// second (one bucket for all callers): 50 calls, 10 at a time, each retried
// up to 20 times, on real time (about 10 s). No retry may come before the Retry-After
// of the refusal it follows, and every call must succeed; the test logs
// requests per success (issue 23's figure: 2.6 with 49 of 50 succeeding).
func TestRetryableHTTP(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(5))
	require.NoError(t, err)
	defer lim.Close()

	type attempt struct {
		at    time.Time
		retry time.Duration // the Retry-After it was answered with; 0: admitted
	}
	var mu sync.Mutex
	attempts := map[string][]attempt{} // by the call's X-Call
	mw, err := httplimit.New(httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "all", nil },
		Policies: []quota.Policy{{Name: "second", Limiter: lim}},
		OnDecision: func(r *http.Request, d quota.Decision) {
			a := attempt{at: time.Now()}
			if !d.Result.Allowed {
				secs, _ := ratefields.RetryAfterSeconds(d.Result)
				a.retry = time.Duration(secs) * time.Second
			}
			mu.Lock()
			attempts[r.Header.Get("X-Call")] = append(attempts[r.Header.Get("X-Call")], a)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()

	client := retryablehttp.NewClient()
	client.HTTPClient = srv.Client()
	client.RetryMax = 20
	client.Logger = nil
	const calls, workers = 50, 10
	jobs := make(chan int)
	var wg sync.WaitGroup
	var okMu sync.Mutex
	succeeded := 0
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				req, err := retryablehttp.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
				if err != nil {
					panic(err)
				}
				req.Header.Set("X-Call", strconv.Itoa(i))
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						okMu.Lock()
						succeeded++
						okMu.Unlock()
					}
				}
			}
		})
	}
	for i := range calls {
		jobs <- i
	}
	close(jobs)
	wg.Wait()

	requests, retries := 0, 0
	for call, as := range attempts {
		requests += len(as)
		for j := 1; j < len(as); j++ {
			retries++
			require.False(t, as[j].at.Before(as[j-1].at.Add(as[j-1].retry)),
				"call %s: attempt %d came %v after a refusal with Retry-After %v", call, j, as[j].at.Sub(as[j-1].at), as[j-1].retry)
		}
	}
	require.Equal(t, calls, succeeded, "calls that succeeded")
	require.Len(t, attempts, calls)
	t.Logf("go-retryablehttp at 5/s: %d of %d calls succeeded, %d requests (%d retries, none before Retry-After), %.2f requests per success",
		succeeded, calls, requests, retries, float64(requests)/float64(succeeded))
}
