package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/stretchr/testify/require"
)

// TestTransportThrottlesAFailingPartner: a partner on 127.0.0.1 answers
// 500 to every request for 5 s, between 2 s of health and 5 s of health
// again; a client sends 100 requests a second, one at a time, on a mock
// clock, through a Transport with Throttle 2. During the failure the
// Transport sends no more than 1.2 × what the formula lets through (the
// sum of 1 − p over the attempts) and under a fifth of the attempts; from
// 2 s after the partner recovers it sends every request again. Its
// decisions are, one by one, those of the formula written plainly
// (throttleModel) with the same random numbers.
func TestTransportThrottlesAFailingPartner(t *testing.T) {
	const step, warm, failing, after = 10 * ms, 2 * s, 5 * s, 5 * s
	mock := clock.NewMock()
	t0 := mock.Now()
	failFrom, failTo := t0.Add(warm), t0.Add(warm+failing)
	srv := newPartner(t, mock, func(int, *http.Request, http.Header) int {
		if now := mock.Now(); !now.Before(failFrom) && now.Before(failTo) {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	c := &http.Client{Transport: &httplimit.Transport{Throttle: 2, Clock: mock, Rand: seeded(1)}}
	model, u := &throttleModel{k: 2, window: 250 * ms, at: t0}, seeded(1)

	type phase struct {
		attempts, sent int
		allowed        float64 // Σ (1 − p): what the formula lets through
		lastThrottled  time.Duration
	}
	var phases [3]phase // healthy, failing, recovered
	for now := t0; now.Before(failTo.Add(after)); now = now.Add(step) {
		mock.Set(now)
		ph := &phases[0]
		if !now.Before(failTo) {
			ph = &phases[2]
		} else if !now.Before(failFrom) {
			ph = &phases[1]
		}
		resp, err := fetch(c, context.Background(), srv.URL)
		p, send := model.admit(now, u())
		ph.attempts++
		ph.allowed += 1 - p
		if !send {
			require.ErrorIs(t, err, httplimit.ErrThrottled, "at %v", now.Sub(t0))
			ph.lastThrottled = now.Sub(t0)
			continue
		}
		require.NoError(t, err, "at %v: the formula sends it (p %.3f)", now.Sub(t0), p)
		ph.sent++
		model.answered(now, resp.StatusCode == http.StatusOK)
	}
	t.Logf("phases (healthy, failing, recovered): %+v", phases)
	require.Equal(t, phases[0].attempts, phases[0].sent, "a healthy partner gets every request")
	require.Equal(t, phases[0].sent+phases[1].sent+phases[2].sent, srv.count(), "a throttled request reaches nobody")
	fail := phases[1]
	require.LessOrEqual(t, float64(fail.sent), 1.2*fail.allowed, "sent during the failure, against what the formula allows")
	require.Less(t, fail.sent, fail.attempts/5, "the Transport stops hammering the partner")
	require.Less(t, phases[2].lastThrottled, warm+failing+2*s, "every request goes from 2 s after the recovery")
}

// TestTransportThrottleCountsWhatThePartnerSays: on a frozen clock, with
// random numbers of 0.5, the third request to a partner that failed the
// first two is rejected (p 2/3), and to one that accepted them sent (p 0).
// A refusal, a 5xx, what Refused says is a refusal and an error of Base are
// failures; other answers are accepts; a request whose caller cancelled it
// is not counted.
func TestTransportThrottleCountsWhatThePartnerSays(t *testing.T) {
	answer := func(status int) roundTripFunc {
		return func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Body: http.NoBody, Header: http.Header{}}, nil
		}
	}
	cases := []struct {
		name      string
		base      roundTripFunc
		refused   func(*http.Response) bool
		throttled bool
	}{
		{"200", answer(200), nil, false},
		{"404", answer(404), nil, false},
		{"403", answer(403), nil, false},
		{"403 Refused says so", answer(403), func(r *http.Response) bool { return r.StatusCode == 403 }, true},
		{"429", answer(429), nil, true},
		{"503", answer(503), nil, true},
		{"500", answer(500), nil, true},
		{"502", answer(502), nil, true},
		{"transport error", func(*http.Request) (*http.Response, error) { return nil, errors.New("connection reset") }, nil, true},
		{"cancelled by the caller", nil, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &httplimit.Transport{Base: tc.base, Refused: tc.refused, Throttle: 2,
				Clock: clock.NewMock(), Rand: func() float64 { return 0.5 }}
			for i := range 3 {
				ctx, cancel := context.WithCancel(context.Background())
				if tc.base == nil {
					tr.Base = roundTripFunc(func(*http.Request) (*http.Response, error) { cancel(); return nil, ctx.Err() })
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://partner.test/", nil)
				_, err := tr.RoundTrip(req)
				cancel()
				if i < 2 || !tc.throttled {
					require.False(t, errors.Is(err, httplimit.ErrThrottled), "request %d: %v", i, err)
					continue
				}
				te := transportError(t, err)
				require.ErrorIs(t, err, httplimit.ErrThrottled)
				require.Equal(t, "partner.test", te.Key)
				require.Equal(t, `httplimit: not sending to "partner.test": httplimit: throttled locally, `+
					`rejected with probability 0.67 = (requests 2.0 − K 2 × accepts 0.0) / (requests + 1), counted over 250ms`, err.Error())
			}
		})
	}
}

// TestTransportThrottleUnderManyGoroutines: 64 goroutines send 25 requests
// each at once through one Transport, with Throttle and Concurrency, to a
// partner that accepts one request in three and fails the rest, on a
// frozen clock. Every request is sent or throttled, none both; the partner sees
// exactly those sent; every slot comes back; and the Transport counted
// exactly every attempt and every accept (the counts in the message of a
// rejection with K 1).
func TestTransportThrottleUnderManyGoroutines(t *testing.T) {
	const goroutines, each = 64, 25
	mock := clock.NewMock()
	srv := newPartner(t, mock, func(n int, _ *http.Request, _ http.Header) int {
		if n%3 == 0 {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	slots, err := keylimit.NewConcurrency[string](8, keylimit.WithClock(mock))
	require.NoError(t, err)
	tr := &httplimit.Transport{Throttle: 2, Concurrency: slots, Clock: mock, Rand: seeded(7)}
	c := &http.Client{Transport: tr}

	var throttled, other tally
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				resp, err := fetch(c, context.Background(), srv.URL)
				if errors.Is(err, httplimit.ErrThrottled) {
					throttled.add(nil, err)
				} else {
					other.add(resp, err)
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, other.errs)
	sent := other.byStatus[200] + other.byStatus[503]
	t.Logf("%d requests sent, %d accepted, %d throttled", sent, other.byStatus[200], len(throttled.errs))
	require.Equal(t, goroutines*each, sent+len(throttled.errs))
	require.Equal(t, sent, srv.count())
	require.Positive(t, len(throttled.errs))
	key := strings.TrimPrefix(srv.URL, "http://")
	require.Equal(t, 8, slots.Peek(key).Remaining, "every slot came back")

	tr.Throttle, tr.Rand = 1, func() float64 { return 0 } // p > 0: the next request is rejected
	_, err = fetch(c, context.Background(), srv.URL)
	require.ErrorContains(t, err, fmt.Sprintf("(requests %d.0 − K 1 × accepts %d.0)", goroutines*each, other.byStatus[200]))
}

// A Throttle below 1, or not a finite number, is an error of RoundTrip,
// which sends nothing.
func TestTransportThrottleMustBeValid(t *testing.T) {
	for _, k := range []float64{0.5, -2} {
		sent := false
		tr := &httplimit.Transport{Throttle: k, Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			sent = true
			return nil, errors.New("sent")
		})}
		req, _ := http.NewRequest(http.MethodGet, "http://partner.test/", nil)
		_, err := tr.RoundTrip(req)
		require.EqualError(t, err, fmt.Sprintf("httplimit: Transport.Throttle is %v: it must be 0 (off) or a finite number of at least 1 (K; 2 is the usual choice)", k))
		require.False(t, sent)
	}
	tr := &httplimit.Transport{Throttle: 2, ThrottleWindow: -time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://partner.test/", nil)
	_, err := tr.RoundTrip(req)
	require.EqualError(t, err, "httplimit: Transport.ThrottleWindow is -1s: it must not be negative")
}

// TestTransportDropsTheSlotOfAFailure: with an adaptive.Limiter for
// Concurrency (AIMD from 1 to 100: the limit starts at the floor, 1; slow
// start doubles it after each window of 16 releases, busy with one call at
// a time, to 4 after 32; a window with a drop ends slow start and cuts it
// by a tenth, to the floor), 32 requests one at a
// time give their slots back by Drop when the answer is a refusal or a
// 5xx, or the send fails (an error of Base, a body that fails, a deadline
// that passes before the body is read), and the limit falls; by Release
// otherwise (a 2xx or a 4xx, a request its caller cancelled), and it stays.
func TestTransportDropsTheSlotOfAFailure(t *testing.T) {
	answer := func(status int, body func() io.Reader) roundTripFunc {
		return func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Body: io.NopCloser(body()), Header: http.Header{}}, nil
		}
	}
	text := func() io.Reader { return strings.NewReader("a body") }
	failing := func() io.Reader { return iotest.ErrReader(errors.New("connection reset")) }
	background := func() (context.Context, func()) { return context.Background(), func() {} }
	cases := []struct {
		name    string
		base    roundTripFunc
		ctx     func() (context.Context, func()) // the request's, and how it ends, its body unread
		dropped bool
	}{
		{"200", answer(200, text), nil, false},
		{"404", answer(404, text), nil, false},
		{"429", answer(429, text), nil, true},
		{"503", answer(503, text), nil, true},
		{"500", answer(500, text), nil, true},
		{"503 with no body", func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 503, Body: http.NoBody, Header: http.Header{}}, nil
		}, nil, true},
		{"error of Base", func(*http.Request) (*http.Response, error) { return nil, errors.New("connection reset") }, nil, true},
		{"the body fails", answer(200, failing), nil, true},
		{"the deadline passes", answer(200, text), func() (context.Context, func()) {
			ctx := &expiring{Context: context.Background(), done: make(chan struct{})}
			return ctx, func() { close(ctx.done) }
		}, true},
		{"cancelled by the caller", answer(200, text), func() (context.Context, func()) {
			return context.WithCancel(context.Background())
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			adaptive, err := adaptive.New[string](adaptive.AIMD(1, 100), keylimit.WithClock(clock.NewMock()))
			require.NoError(t, err)
			defer adaptive.Close()
			require.Equal(t, 1, adaptive.Stats().Limit)
			tr := &httplimit.Transport{Base: tc.base, Concurrency: adaptive}
			for range 32 {
				ctx, end := background()
				if tc.ctx != nil {
					ctx, end = tc.ctx()
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://partner.test/", nil)
				resp, err := tr.RoundTrip(req)
				if err == nil && tc.ctx == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				end()
				waitFor(t, "the slot back", func() bool { return adaptive.Peek("partner.test").Remaining == adaptive.Peek("partner.test").Limit })
			}
			want := 4 // released: slow start doubled it twice
			if tc.dropped {
				want = 1 // dropped: cut, to the floor
			}
			require.Equal(t, want, adaptive.Stats().Limit, "the slots went back by Drop (1) or Release (4)")
		})
	}
}

// A retry is a send like any other: Throttle may reject it. Against a
// partner that refuses everything, with random numbers of 0.5, the first
// send and the first retry go (p 0, then 1/2), the second retry is rejected
// (p 2/3, the counts barely decayed over the backoff): RoundTrip returns a
// *TransportError that names the last refusal, and nothing more is sent.
func TestTransportThrottleRejectsARetry(t *testing.T) {
	var sent int
	base := roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: 503, Body: http.NoBody, Header: http.Header{}}, nil
	})
	tr := retrying(clock.NewMock(), 0.5, base)
	tr.Throttle, tr.ThrottleWindow = 2, time.Hour
	req, _ := http.NewRequest(http.MethodGet, "http://partner.test/", nil)
	_, err := tr.RoundTrip(req)
	te := transportError(t, err)
	require.ErrorIs(t, err, httplimit.ErrThrottled)
	require.Equal(t, 2, sent)
	require.Equal(t, 1, te.Retries)
	require.Equal(t, 503, te.StatusCode)
	require.True(t, strings.HasPrefix(err.Error(),
		`httplimit: not sending to "partner.test" again after 503 Service Unavailable (1 retry so far): httplimit: throttled locally, rejected with probability 0.67`), err.Error())
}
