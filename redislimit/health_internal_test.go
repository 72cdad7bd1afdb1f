package redislimit

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestCloseEndsTheCheckOfTheServer: the background check of the server
// (checkPolicySoon), asking a server that never answers, is under way when
// the limiter closes; closeChecks returns only once it has ended (its
// verdict, "unchecked" after a failure, is written), and no call after it
// starts another. Before, Close left the check running for up to a second,
// a goroutine after Close.
func TestCloseEndsTheCheckOfTheServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var conns sync.WaitGroup
	asked := make(chan struct{}, 16)
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { // reads what it is asked, and never answers
				defer c.Close()
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					select {
					case asked <- struct{}{}:
					default:
					}
				}
			})
		}
	})
	client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true,
		MaxRetries: -1, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
	t.Cleanup(func() {
		client.Close()
		ln.Close()
		conns.Wait()
	})

	var o ops
	o.init("check", client, 50*time.Millisecond, nil, 0, FailClosed(), nil) // the check waits a second
	o.checkPolicySoon()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the check never asked the server")
	}
	done := make(chan struct{})
	go func() { o.closeChecks(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("closeChecks did not end the check under way")
	}
	require.Equal(t, policyUnchecked, o.evict.Load(), "closeChecks returned before the check under way ended")
	for len(asked) > 0 {
		<-asked
	}
	o.checkPolicySoon() // as the next successful call would
	o.checking.Wait()
	select {
	case <-asked:
		t.Fatal("a check started after closeChecks")
	case <-time.After(200 * time.Millisecond):
	}
}
