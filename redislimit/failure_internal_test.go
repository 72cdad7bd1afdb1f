package redislimit

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// replyError is an error reply as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestScriptFailure: the error replies that say the script failed are
// script errors, as redis-server 6 and 7 and miniredis word them; NOSCRIPT
// (the script is sent again), the replies of the commands a script calls
// (OOM, READONLY, WRONGTYPE: what the server cannot do) and the script's
// own error replies are not, nor is an error that is no reply.
func TestScriptFailure(t *testing.T) {
	for msg, want := range map[string]bool{
		"ERR Error compiling script (new function): user_script:1: '=' expected near 'x'":                                          true,
		"ERR Error running script (call to f_1a2b): @user_script:34: user_script:34: attempt to perform arithmetic on a nil value": true,
		"ERR user_script:34: attempt to perform arithmetic on a nil value script: 6afd35ce, on @user_script:34.":                   true,
		"ERR redislimit: refund of a malformed mark x script: 6afd35ce, on @user_script:167.":                                      true,
		"ERR Error compiling script (new function): table: 0x3f33 stack traceback: [G]: in function 'error'":                       true,
		"NOSCRIPT No matching script. Please use EVAL.":                                                                            false,
		"OOM command not allowed when used memory > 'maxmemory'. script: 6afd35ce, on @user_script:40.":                            false,
		"READONLY You can't write against a read only replica. script: 6afd35ce, on @user_script:40.":                              false,
		"WRONGTYPE Operation against a key holding the wrong kind of value script: 6afd35ce, on @user_script:20.":                  false,
		"redislimit: calendar stale 1798693200000000":                                                                              false,
		"ERR max number of clients reached":                                                                                        false,
	} {
		err := scriptFailure(replyError(msg))
		require.Equal(t, want, errors.Is(err, ErrScript), "%q", msg)
		require.ErrorIs(t, err, replyError(msg), "%q: the reply is still there", msg)
	}
	require.NoError(t, scriptFailure(nil))
	plain := errors.New("ERR Error running script: not a reply")
	require.Equal(t, plain, scriptFailure(plain))
}

// FuzzScriptFailure: any reply, as a server might send, is classified
// without panicking, a script error only if it is an "ERR" reply that says
// so, and is kept inside the error returned.
func FuzzScriptFailure(f *testing.F) {
	for _, seed := range []string{"ERR Error compiling script", "ERR x on @user_script:1.", "NOSCRIPT", "", "ERR "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		err := scriptFailure(replyError(msg))
		if errors.Is(err, ErrScript) && !strings.HasPrefix(msg, "ERR ") {
			t.Fatalf("%q: a script error", msg)
		}
		if !errors.Is(err, replyError(msg)) {
			t.Fatalf("%q: the reply is lost", msg)
		}
	})
}
