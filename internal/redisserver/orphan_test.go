package redisserver

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// orphanEnv, set, makes TestServerDiesWithItsTestBinary the child: it
// starts a server, prints its address and waits to be killed.
const orphanEnv = "REDISSERVER_ORPHAN_CHILD"

// TestServerDiesWithItsTestBinary: a test binary killed with SIGKILL (as go
// test's -timeout kills one), before any cleanup can run, leaves no
// redis-server behind it.
func TestServerDiesWithItsTestBinary(t *testing.T) {
	if os.Getenv(orphanEnv) != "" {
		s, err := Start(0)
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString("addr " + s.Addr + "\n")
		time.Sleep(time.Minute) // killed before this ends
		os.Exit(3)
	}
	if runtime.GOOS != "linux" {
		t.Skip("only Linux kills a child with its parent (Pdeathsig)")
	}
	require.True(t, Installed(), "the test needs redis-server, and "+InstallHint)
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithItsTestBinary$")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the child's address")
	addr := strings.TrimSpace(strings.TrimPrefix(line, "addr "))
	require.NoError(t, ping(addr), "the child's server answers while the child lives")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for ping(addr) == nil {
		require.True(t, time.Now().Before(deadline), "the server on %s still answers 10 s after its test binary was killed", addr)
		time.Sleep(20 * time.Millisecond)
	}
}
