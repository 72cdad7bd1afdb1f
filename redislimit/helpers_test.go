package redislimit_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// keySeq makes keys unique within the test binary.
var keySeq atomic.Int64

// testKey returns a key no other test uses, so that tests can share a
// server.
func testKey(t testing.TB, name string) string {
	return fmt.Sprintf("%s/%s/%d", t.Name(), name, keySeq.Add(1))
}

// patient is a timeout for tests that count exactly: a slow round trip on a
// busy machine must not become a failure-policy decision.
const patient = 10 * time.Second
