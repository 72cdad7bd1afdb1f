package redislimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer makes a limiter's plain takes share round trips when many are
// under way at once: up to maxFlights script calls are in flight, each
// made as without it; a take that finds them all under way waits in a
// queue, and when a flight returns, the queue goes as one pipeline (one
// write, one read of every reply) under the goroutine of the first take in
// it. In a pipeline, the takes of one plain script with the same
// arguments go in calls of up to maxBatch takes each (lua/take_batch.lua),
// so that the server pays a call's cost once for them: on one server every take may share a call,
// on Redis Cluster those of one hash slot, on a Ring (or a client of
// another kind) none. Each take is still decided as its own script would
// decide it, in the order of the queue, so no decision changes; a take
// waits at most for the flight ahead of it before its own.
//
// Only takes with no cancel or deadline of their own queue (Take, Allow:
// the limiter's timeout bounds the call); a TakeContext under a context
// that can end calls at once, as without a coalescer.
type coalescer struct {
	client  redis.UniversalClient
	timeout time.Duration
	// sharing is which takes may share a call: shareAll, shareSlot or
	// shareNone (setClient).
	sharing int8
	mu      sync.Mutex // protects the fields below
	flights int        // script calls or pipelines in flight
	queue   []*queued  // takes waiting for a flight to return
}

// setClient makes c the coalescer of client's plain takes, each call bounded
// by timeout.
func (c *coalescer) setClient(client redis.UniversalClient, timeout time.Duration) {
	c.client, c.timeout, c.sharing = client, timeout, shareNone
	switch client.(type) {
	case *redis.Client:
		c.sharing = shareAll // one server (or the primary a Sentinel names)
	case *redis.ClusterClient:
		c.sharing = shareSlot // a script's keys must share a slot
	}
}

// Which takes of a pipeline may share a script call.
const (
	shareNone int8 = iota // each its own: a Ring, or a client the coalescer does not know
	shareAll              // all of one script and arguments
	shareSlot             // those of one hash slot as well
)

// maxBatch is the most takes one script call makes: enough that a call's
// own cost is a small part of each take's, few enough that the server is
// never busy with one call for long (64 takes of the longest plain path
// are well under a ms of its time).
const maxBatch = 64

// maxFlights is how many calls a limiter keeps in flight before it queues
// takes: enough to keep a round trip's latency out of the common case, few
// enough that a busy instance's takes go in pipelines.
const maxFlights = 4

// queued is a take waiting in the coalescer's queue: its script call, and
// where its answer goes. done is closed when reply and err are set, or
// when batch is, for the take that sends the next pipeline.
type queued struct {
	script *redis.Script
	keys   []string
	args   []any
	reply  string
	err    error
	batch  []*queued // set for the take that sends them
	done   chan struct{}
}

var queuedPool = sync.Pool{New: func() any { return &queued{done: make(chan struct{}, 1)} }}

// run makes the plain take a under ctx, within the coalescer's timeout,
// alone or in a pipeline with other takes, and returns the script's reply.
func (c *coalescer) run(ctx context.Context, a *takeArgs) (string, error) {
	if ctx.Done() != nil {
		return c.call(ctx, a)
	}
	c.mu.Lock()
	if c.flights < maxFlights {
		c.flights++
		c.mu.Unlock()
		reply, err := c.call(ctx, a)
		c.handOn()
		return reply, err
	}
	q := queuedPool.Get().(*queued)
	q.script = a.script
	q.keys, q.args = a.fill(q.keys[:0], q.args[:0])
	c.queue = append(c.queue, q)
	c.mu.Unlock()
	<-q.done
	if q.batch != nil {
		c.send(q.batch) // q is the first of it, and answered by it too
		c.handOn()
	}
	reply, err := q.reply, q.err
	q.reply, q.err, q.batch, q.script = "", nil, nil, nil
	clear(q.keys)
	clear(q.args)
	queuedPool.Put(q)
	return reply, err
}

// call makes one script call, as a limiter without a coalescer does.
func (c *coalescer) call(ctx context.Context, a *takeArgs) (string, error) {
	cl, tctx, cancel := startCall(ctx, c.timeout)
	keys, args := a.fill(cl.keys[:0], cl.args[:0])
	reply, err := a.script.Run(tctx, c.client, keys, args...).Text()
	cl.end(cancel)
	return reply, err
}

// takeArgs is a plain take's script call: the script, the key's state and
// the arguments (see lua/take_bucket.lua).
type takeArgs struct {
	script     *redis.Script
	key        string // the state's Redis key
	args       [4]any // keyLimit.plainArgs
	fixedClock bool   // the tests' time, now, is passed
	now        time.Time
	// end is a fixed window's end as the take expects it (µs since the
	// epoch; keyLimit.plainArgs), which its reply on a count is of.
	end int64
}

// fill appends a's keys and arguments to keys and args.
func (a *takeArgs) fill(keys []string, args []any) ([]string, []any) {
	keys = append(keys, a.key)
	for _, v := range a.args {
		if v != nil { // a script of three arguments has no fourth
			args = append(args, v)
		}
	}
	if a.fixedClock {
		args = append(args, a.now.Unix(), a.now.Nanosecond())
	}
	return keys, args
}

// handOn is called by a flight that returned: the takes queued meanwhile
// become the next flight, sent by the first of them; without any, there is
// one flight fewer.
func (c *coalescer) handOn() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.flights--
		c.mu.Unlock()
		return
	}
	batch := c.queue
	c.queue = make([]*queued, 0, len(batch))
	c.mu.Unlock()
	batch[0].batch = batch
	batch[0].done <- struct{}{}
}

// send makes the script calls of batch in one pipeline, and answers every
// take in it but the first, whose goroutine sends it. The takes that may
// share a call (see coalescer) go in one of their script's batch, up to
// maxBatch a call; the others each in a call of its own. A call the server
// answers NOSCRIPT (it lost the scripts) is made again alone, by
// redis.Script.Run, which loads its script.
func (c *coalescer) send(batch []*queued) {
	cl, ctx, cancel := startCall(context.Background(), c.timeout)
	calls := c.group(batch)
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.client.Pipeline()
	for i, call := range calls {
		cmds[i] = call.eval(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	for i, call := range calls {
		call.answer(ctx, c.client, cmds[i])
	}
	cl.end(cancel)
	for _, q := range batch[1:] {
		q.done <- struct{}{}
	}
}

// scriptCall is one script call of a pipeline: the takes it makes, in
// order, and for more than one the script that makes them all, each with
// the same arguments.
type scriptCall struct {
	takes []*queued
	batch *redis.Script // nil for one take
}

// group sorts batch's takes into script calls, in order (a call is placed
// where its first take was): takes of one script with the same arguments
// (a limiter's takes of one event, in one window) share a call, which
// sends the arguments once.
func (c *coalescer) group(batch []*queued) []scriptCall {
	calls := make([]scriptCall, 0, len(batch))
	if c.sharing == shareNone || len(batch) == 1 {
		for _, q := range batch {
			calls = append(calls, scriptCall{takes: []*queued{q}})
		}
		return calls
	}
	type sharedBy struct {
		script *redis.Script
		args   [maxTakeArgs]any // nil after the last: no argument is nil (takeArgs.fill)
		slot   uint16
	}
	open := make(map[sharedBy]int, 4) // the call that takes alike join, while it has room
	for _, q := range batch {
		if len(q.args) > maxTakeArgs {
			calls = append(calls, scriptCall{takes: []*queued{q}})
			continue
		}
		k := sharedBy{script: q.script}
		copy(k.args[:], q.args)
		if c.sharing == shareSlot {
			k.slot = hashSlot(q.keys[0])
		}
		if i, ok := open[k]; ok && len(calls[i].takes) < maxBatch {
			calls[i].takes = append(calls[i].takes, q)
			calls[i].batch = batchOf[q.script]
			continue
		}
		open[k] = len(calls)
		calls = append(calls, scriptCall{takes: []*queued{q}})
	}
	return calls
}

// maxTakeArgs is the most arguments a plain take has: takeArgs's four, and
// the tests' time.
const maxTakeArgs = 6

// eval queues call's script call on pipe.
func (call *scriptCall) eval(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	q := call.takes[0]
	if call.batch == nil {
		return q.script.EvalSha(ctx, pipe, q.keys, q.args...)
	}
	return call.batch.EvalSha(ctx, pipe, call.keys(), q.args...)
}

// keys returns the keys of call's takes, in order.
func (call *scriptCall) keys() []string {
	keys := make([]string, len(call.takes))
	for i, q := range call.takes {
		keys[i] = q.keys[0]
	}
	return keys
}

// answer sets the reply or error of each take of call from cmd, its reply.
func (call *scriptCall) answer(ctx context.Context, client redis.UniversalClient, cmd *redis.Cmd) {
	if call.batch == nil {
		q := call.takes[0]
		q.reply, q.err = cmd.Text()
		if q.err != nil && redis.HasErrorPrefix(q.err, "NOSCRIPT") {
			q.reply, q.err = q.script.Run(ctx, client, q.keys, q.args...).Text()
		}
		return
	}
	replies, err := cmd.Slice()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		replies, err = call.batch.Run(ctx, client, call.keys(), call.takes[0].args...).Slice()
	}
	if err == nil && len(replies) != len(call.takes) {
		err = fmt.Errorf("redislimit: the script replied %d replies to %d takes", len(replies), len(call.takes))
	}
	for i, q := range call.takes {
		if err != nil {
			q.reply, q.err = "", err
			continue
		}
		q.reply, q.err = batchReply(replies[i])
	}
}

// batchReply reads one take's part of lua/take_batch.lua's reply: the
// reply of its script, or '~' and the error it failed with, which is
// returned as a Redis error reply (as its script's own call would have).
func batchReply(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("redislimit: the script replied %T for a take, want a string", v)
	}
	if msg, failed := strings.CutPrefix(s, "~"); failed {
		return "", takeError(msg)
	}
	return s, nil
}

// takeError is an error a take's script failed with in a batch: a
// redis.Error, as the script's own call would have returned.
type takeError string

func (e takeError) Error() string { return string(e) }

// RedisError marks takeError a redis.Error.
func (takeError) RedisError() {}

// hashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, the bytes between its first '{' and the next '}' if there are
// any, else of the whole key, modulo 16384.
func hashSlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
