package redislimit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestGroupTakes: how a pipeline's takes go into script calls. On one
// server, takes of one script and the same arguments share a call, up to
// maxBatch, in the order queued, and a take of other arguments or of
// another script is in a call of its own kind; on a Cluster, those of one
// hash slot only (hashSlot, which TestCluster/SharedCalls holds to the
// server's CLUSTER KEYSLOT); on a Ring, none.
func TestGroupTakes(t *testing.T) {
	take := func(script *redis.Script, key string, args ...any) *queued {
		return &queued{script: script, keys: []string{key}, args: args}
	}
	var batch []*queued
	for i := range 150 {
		batch = append(batch, take(takeBucketScript, "p{"+strconv.Itoa(i)+"}", "1 1", int64(1), int64(1e9)))
		if i == 10 {
			batch = append(batch, take(takeBucketScript, "p{x}", "2 1", int64(1), int64(1e9))) // n = 2
			batch = append(batch, take(takeSlidingScript, "p{y}", int64(2001), "@head"))
		}
	}
	sizes := func(calls []scriptCall) (n []int) {
		for _, c := range calls {
			n = append(n, len(c.takes))
			if len(c.takes) > 1 {
				require.Same(t, batchOf[c.takes[0].script], c.batch, "the batch of the call's script")
				for _, q := range c.takes {
					require.Equal(t, c.takes[0].args, q.args, "the arguments of one call's takes")
					require.Same(t, c.takes[0].script, q.script)
				}
			} else {
				require.Nil(t, c.batch, "a call of one take: its own script")
			}
		}
		return n
	}

	// Clients that are never dialled, closed at the end: a Ring and a
	// Cluster client run goroutines of their own until then.
	single, clusterClient, ringClient := redis.NewClient(&redis.Options{}), redis.NewClusterClient(&redis.ClusterOptions{}),
		redis.NewRing(&redis.RingOptions{})
	t.Cleanup(func() { single.Close(); clusterClient.Close(); ringClient.Close() })
	var one coalescer
	one.setClient(single, time.Second)
	calls := one.group(batch)
	require.Equal(t, []int{maxBatch, 1, 1, maxBatch, 150 - 2*maxBatch}, sizes(calls), "the calls on one server")
	require.Equal(t, "p{0}", calls[0].takes[0].keys[0], "the first call's first take")
	require.Equal(t, "p{11}", calls[0].takes[11].keys[0], "the first call keeps the queue's order past the others")
	require.Equal(t, "p{x}", calls[1].takes[0].keys[0])
	require.Equal(t, "p{64}", calls[3].takes[0].keys[0], "the second full call")

	var cluster coalescer
	cluster.setClient(clusterClient, time.Second)
	same := []*queued{take(takeBucketScript, "a{k}", "1 1"), take(takeBucketScript, "b{j}", "1 1"), take(takeBucketScript, "c{k}", "1 1")}
	require.NotEqual(t, hashSlot("a{k}"), hashSlot("b{j}"))
	calls = cluster.group(same)
	require.Equal(t, []int{2, 1}, sizes(calls), "the calls on a Cluster")
	require.Equal(t, []string{"a{k}", "c{k}"}, calls[0].keys(), "the call of slot %d", hashSlot("a{k}"))

	var ring coalescer
	ring.setClient(ringClient, time.Second)
	require.Equal(t, []int{1, 1, 1}, sizes(ring.group(same)), "the calls on a Ring")

	// CRC16/XMODEM's check value: "123456789" is 0x31C3.
	require.EqualValues(t, 0x31C3, hashSlot("123456789"))
	require.Equal(t, hashSlot("k"), hashSlot("x{k}y"), "the tag alone")
}

// FuzzBatchReply feeds batchReply any part of a shared call's reply, as a
// server (or something posing as one) might send it: it never panics, and
// returns the text as the take's reply, or for '~' and an error, that
// error as a redis.Error (which the take's checks read, as WRONGTYPE); a
// part that is not text is an error.
func FuzzBatchReply(f *testing.F) {
	for _, seed := range []string{"@1 2 3 4", "=5", "full", "~WRONGTYPE Operation against a key", "~", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		reply, err := batchReply(s)
		if msg, failed := strings.CutPrefix(s, "~"); failed {
			var e redis.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, msg, err.Error())
			require.Empty(t, reply)
			require.Equal(t, strings.HasPrefix(msg, "WRONGTYPE"), wrongType(err))
			return
		}
		require.NoError(t, err)
		require.Equal(t, s, reply)
		_, err = batchReply([]byte(s))
		require.Error(t, err, "a part that is not text")
	})
}
