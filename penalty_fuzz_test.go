package keylimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// scripted is a limiter whose answers the fuzzer chooses: the next Take
// answers next, and calls counts the Takes.
type scripted struct {
	next  keylimit.Result
	calls int
}

func (s *scripted) Allow(key string) bool         { return s.Take(key, 1).Allowed }
func (s *scripted) AllowN(key string, n int) bool { return s.Take(key, n).Allowed }

func (s *scripted) Take(string, int) keylimit.Result { s.calls++; return s.next }
func (s *scripted) Peek(string) keylimit.Result      { return s.next }
func (s *scripted) Reset(string)                     {}

// refPenalty is the penalty's rule, kept the obvious way: every refusal's
// time since the key's last ban, and the ban's end.
type refPenalty struct {
	ban      keylimit.Ban
	refusals map[string][]time.Duration
	until    map[string]time.Duration
}

// take returns whether key is banned at now, and if not, records the
// limiter's refusal, if it is one, and reports whether it starts a ban.
func (m *refPenalty) take(key string, now time.Duration, refused bool) (banned, asked bool, left time.Duration) {
	if u, ok := m.until[key]; ok && u > now {
		return true, false, u - now
	}
	if !refused {
		return false, true, 0
	}
	rs := append(m.refusals[key], now)
	m.refusals[key] = rs
	if k := len(rs) - m.ban.Refusals; k >= 0 && now-rs[k] < m.ban.Within {
		m.until[key] = now + m.ban.For
		delete(m.refusals, key)
		return true, true, m.ban.For
	}
	return false, true, 0
}

// FuzzPenalty checks Penalty against refPenalty, over a scripted limiter:
// each op is a key and the method (Take or Allow), a step of time and the
// limiter's answer.
func FuzzPenalty(f *testing.F) {
	f.Add(uint8(3), uint8(4), []byte{0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 20, 1, 0, 99, 0})
	f.Add(uint8(1), uint8(1), []byte{0, 0, 0, 0, 3, 1, 1, 0, 1, 0, 8, 0, 0, 2, 1})
	f.Add(uint8(2), uint8(15), []byte{2, 7, 1, 2, 7, 1, 2, 1, 1, 2, 0, 1, 1, 1, 1, 2, 200, 0})
	f.Fuzz(func(t *testing.T, refusals, length uint8, ops []byte) {
		const unit = time.Second
		ban := keylimit.Ban{Refusals: int(refusals%4) + 1, Within: 8 * unit, For: time.Duration(length%16+1) * unit}
		inner := &scripted{}
		mock := clock.NewMock()
		p, err := keylimit.NewPenalty[string](inner, ban, keylimit.WithClock(mock), keylimit.WithEvictionInterval(0))
		require.NoError(t, err)
		defer p.Close()
		ref := &refPenalty{ban: ban, refusals: map[string][]time.Duration{}, until: map[string]time.Duration{}}
		keys := []string{"a", "b", "c"}
		var now time.Duration
		for i := 0; i+2 < len(ops); i += 3 {
			key := keys[int(ops[i])%len(keys)]
			step := time.Duration(ops[i+1]%32) * unit / 4
			mock.Add(step)
			now += step
			retry := time.Duration(ops[i+2]/2) * unit / 8
			refused := ops[i+2]%2 == 1
			inner.next = keylimit.Result{Allowed: !refused, Limit: 5}
			if refused {
				inner.next.RetryAfter = retry
			}
			calls := inner.calls
			banned, asked, left := ref.take(key, now, refused)
			if ops[i]/3%2 == 1 { // Allow, which asks by AllowN, then Peek
				require.Equal(t, !banned && !refused, p.Allow(key), "op %d: Allow", i/3)
				require.Equal(t, asked, inner.calls > calls, "op %d: asked the limiter", i/3)
				continue
			}
			got := p.Take(key, 1)
			require.Equal(t, asked, inner.calls > calls, "op %d: asked the limiter", i/3)
			require.Equal(t, banned, got.Banned, "op %d: banned (%v)", i/3, got)
			require.Equal(t, !banned && !refused, got.Allowed, "op %d: allowed (%v)", i/3, got)
			switch {
			case banned && asked:
				require.Equal(t, max(retry, left), got.RetryAfter, "op %d", i/3)
			case banned:
				require.Equal(t, left, got.RetryAfter, "op %d", i/3)
				require.Equal(t, 5, got.Limit, "op %d", i/3)
			default:
				require.Equal(t, inner.next, got, "op %d: the limiter's answer, as it is", i/3)
			}
		}
	})
}
