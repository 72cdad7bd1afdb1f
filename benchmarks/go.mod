module github.com/keylimit/keylimit/benchmarks

go 1.26.0

replace github.com/keylimit/keylimit => ../

require (
	github.com/juju/ratelimit v1.0.2
	github.com/keylimit/keylimit v0.1.0
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/sethvargo/go-limiter v0.7.1
	github.com/throttled/throttled/v2 v2.15.0
	github.com/ulule/limiter/v3 v3.11.2
	golang.org/x/time v0.16.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
)
