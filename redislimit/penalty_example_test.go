package redislimit_test

import (
	"fmt"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// Two instances share a login limit of 3 a minute per account and its
// penalty: an account refused twice within a minute, on any instance, is
// locked for 15 minutes on both, and each answers it without Redis.
func ExampleNewPenalty() {
	var fleet []*keylimit.Penalty[string]
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer client.Close()
		attempts, err := redislimit.NewTokenBucket(client, "login-example", keylimit.PerMinute(3), redislimit.WithTimeout(time.Second))
		if err != nil {
			panic(err)
		}
		defer attempts.Close()
		login, err := redislimit.NewPenalty(client, "login-example", attempts,
			keylimit.Ban{Refusals: 2, Within: time.Minute, For: 15 * time.Minute}, redislimit.WithTimeout(time.Second))
		if err != nil {
			panic(err)
		}
		defer login.Close()
		fleet = append(fleet, login)
	}
	defer fleet[0].Reset("carol")

	for i := range 6 {
		r := fleet[i%2].Take("carol", 1)
		fmt.Printf("attempt %d on instance %d: allowed=%v banned=%v\n", i+1, i%2, r.Allowed, r.Banned)
	}
	// Output:
	// attempt 1 on instance 0: allowed=true banned=false
	// attempt 2 on instance 1: allowed=true banned=false
	// attempt 3 on instance 0: allowed=true banned=false
	// attempt 4 on instance 1: allowed=false banned=false
	// attempt 5 on instance 0: allowed=false banned=true
	// attempt 6 on instance 1: allowed=false banned=true
}
