package transports_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/conformance"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// answer is what a transport answered one request of a scenario: its
// outcome and its rate-limit fields.
type answer struct {
	Outcome string // admitted, refused, unavailable
	Fields  conformance.Fields
}

// TestFields sends every scenario's requests through httplimit's
// middleware and grpclimit's server interceptors, each on a mock clock of
// its own, and checks each answer's fields with httpsfv (Scenario.Check):
// both transports write valid fields, the same ones for the same request,
// and refuse the same requests.
func TestFields(t *testing.T) {
	distinct := map[string]map[string]bool{"RateLimit": {}, "RateLimit-Policy": {}, "Retry-After": {}}
	for _, s := range conformance.Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			got := overHTTP(t, s)
			require.Equal(t, got, overGRPC(t, s), "gRPC answers each request as HTTP does")
			outcomes := map[string]int{}
			for _, a := range got {
				outcomes[a.Outcome]++
				for name, lines := range map[string][]string{"RateLimit": a.Fields.RateLimit, "RateLimit-Policy": a.Fields.RateLimitPolicy, "Retry-After": a.Fields.RetryAfter} {
					for _, l := range lines {
						distinct[name][l] = true
					}
				}
			}
			require.NotZero(t, outcomes["admitted"], "%v", outcomes)
			if !s.DryRun {
				require.NotZero(t, outcomes["refused"]+outcomes["unavailable"], "%v", outcomes)
			}
		})
	}
	t.Logf("distinct values checked: %d RateLimit, %d RateLimit-Policy, %d Retry-After",
		len(distinct["RateLimit"]), len(distinct["RateLimit-Policy"]), len(distinct["Retry-After"]))
}

// build makes the policies of s on a mock clock of their own.
func build(t *testing.T, s conformance.Scenario) (*clock.Mock, []quota.Policy, map[string][]quota.Policy) {
	mock := clock.NewMock()
	policies, tiers, err := s.Build(mock)
	require.NoError(t, err)
	return mock, policies, tiers
}

// overHTTP sends the requests of s through httplimit's middleware and
// checks each answer.
func overHTTP(t *testing.T, s conformance.Scenario) []answer {
	mock, policies, tiers := build(t, s)
	c := httplimit.Config{
		Key:      httplimit.Header("X-Key"),
		Policies: policies,
		Tiers:    tiers,
		DryRun:   s.DryRun,
	}
	if s.Tier != nil {
		c.Tier = func(_ *http.Request, key string) string { return s.Tier(key) }
	}
	if s.Cost != nil {
		c.Cost = func(r *http.Request) int { return s.Cost(r.URL.Path) }
	}
	limit, err := httplimit.New(c)
	require.NoError(t, err)
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var out []answer
	for i, req := range s.Requests() {
		mock.Add(req.Step)
		r := httptest.NewRequest(http.MethodGet, req.Op, nil)
		r.Header.Set("X-Key", req.Key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		a := answer{Fields: conformance.Fields{
			RateLimit:       w.Header().Values("RateLimit"),
			RateLimitPolicy: w.Header().Values("RateLimit-Policy"),
			RetryAfter:      w.Header().Values("Retry-After"),
		}}
		switch w.Code {
		case http.StatusOK:
			a.Outcome = "admitted"
		case http.StatusTooManyRequests:
			a.Outcome = "refused"
		case http.StatusServiceUnavailable:
			a.Outcome = "unavailable"
		default:
			t.Fatalf("request %d %+v: status %d", i, req, w.Code)
		}
		services, err := s.Check(req, a.Fields, a.Outcome != "admitted" && req.Op != "/huge")
		require.NoError(t, err, "request %d %+v (%s)", i, req, a.Outcome)
		if a.Outcome != "admitted" {
			checkProblem(t, w, a.Outcome, services, s.CostOf(req.Op))
		}
		out = append(out, a)
	}
	return out
}

// checkProblem checks the body of a refusal, which a client without Accept
// gets as an RFC 9457 problem: of the draft's quota-exceeded type (or
// temporary-reduced-capacity, for an untracked key), whose
// violated-policies name policies of the RateLimit field that could not
// afford the request's cost.
func checkProblem(t *testing.T, w *httptest.ResponseRecorder, outcome string, services []conformance.Service, cost int) {
	t.Helper()
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	var p struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), "%s", w.Body)
	want := map[string]string{
		"refused":     "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"unavailable": "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
	}[outcome]
	require.Equal(t, want, p.Type)
	require.Equal(t, w.Code, p.Status)
	require.NotEmpty(t, p.Violated, "violated-policies")
	r := map[string]int64{}
	for _, sv := range services {
		r[sv.Name] = sv.R
	}
	for _, name := range p.Violated {
		left, ok := r[name]
		require.True(t, ok, "violated policy %q is in the RateLimit field", name)
		require.Less(t, left, int64(cost), "violated policy %q could not afford the cost", name)
	}
}
