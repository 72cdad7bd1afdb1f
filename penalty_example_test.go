package keylimit_test

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// A login limited to 5 attempts a minute per account, and an account that
// keeps trying after 3 refusals within a minute is locked for 15 minutes:
// its limit would let it in again a minute later, the ban does not.
func ExamplePenalty() {
	mock := clock.NewMock()
	attempts, _ := keylimit.NewFixedWindow[string](keylimit.PerMinute(5), keylimit.WithClock(mock))
	defer attempts.Close()
	login, _ := keylimit.NewPenalty[string](attempts, keylimit.Ban{Refusals: 3, Within: time.Minute, For: 15 * time.Minute})
	defer login.Close()

	for i := 1; i <= 9; i++ {
		fmt.Printf("attempt %d: %v\n", i, login.Take("alice", 1))
	}
	mock.Add(time.Minute) // a new window: the limit alone would admit
	fmt.Println("a minute later:", login.Take("alice", 1))
	mock.Add(14 * time.Minute)
	fmt.Println("15 minutes later:", login.Take("alice", 1))
	st := login.Stats()
	fmt.Println("bans:", st.Bans, "refused by a ban:", st.BanRefused)
	// Output:
	// attempt 1: allowed: 4 of 5 left, full in 1m0s
	// attempt 2: allowed: 3 of 5 left, full in 1m0s
	// attempt 3: allowed: 2 of 5 left, full in 1m0s
	// attempt 4: allowed: 1 of 5 left, full in 1m0s
	// attempt 5: allowed: 0 of 5 left, full in 1m0s
	// attempt 6: refused: 0 of 5 left, retry in 1m0s, full in 1m0s
	// attempt 7: refused: 0 of 5 left, retry in 1m0s, full in 1m0s
	// attempt 8: refused (banned): 0 of 5 left, retry in 15m0s, full in 15m0s
	// attempt 9: refused (banned): 0 of 5 left, retry in 15m0s, full in 15m0s
	// a minute later: refused (banned): 0 of 5 left, retry in 14m0s, full in 14m0s
	// 15 minutes later: allowed: 4 of 5 left, full in 1m0s
	// bans: 1 refused by a ban: 2
}
