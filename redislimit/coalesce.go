package redislimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer makes a limiter's plain takes share round trips when many are
// under way at once: up to maxFlights script calls are in flight, each
// made as without it; a take that finds them all under way waits in a
// queue, and when a flight returns, the queue goes as one pipeline (one
// write, one read of every reply) under the goroutine of the first take in
// it. Each take is still its own script call, run by the server in the
// order of the pipeline, so no decision changes; a take waits at most for
// the flight ahead of it before its own. Pipelines work on Redis Cluster
// too: the client sends each slot's calls to its node.
//
// Only takes with no cancel or deadline of their own queue (Take, Allow:
// the limiter's timeout bounds the call); a TakeContext under a context
// that can end calls at once, as without a coalescer.
type coalescer struct {
	client  redis.UniversalClient
	timeout time.Duration
	mu      sync.Mutex // protects the fields below
	flights int        // script calls or pipelines in flight
	queue   []*queued  // takes waiting for a flight to return
}

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
// take in it but the first, whose goroutine sends it. A call the server
// answers NOSCRIPT (it lost the scripts) is made again alone, by
// redis.Script.Run, which loads its script.
func (c *coalescer) send(batch []*queued) {
	cl, ctx, cancel := startCall(context.Background(), c.timeout)
	cmds := make([]*redis.Cmd, len(batch))
	pipe := c.client.Pipeline()
	for i, q := range batch {
		cmds[i] = q.script.EvalSha(ctx, pipe, q.keys, q.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, q := range batch {
		q.reply, q.err = cmds[i].Text()
		if q.err != nil && redis.HasErrorPrefix(q.err, "NOSCRIPT") {
			q.reply, q.err = q.script.Run(ctx, c.client, q.keys, q.args...).Text()
		}
	}
	cl.end(cancel)
	for _, q := range batch[1:] {
		q.done <- struct{}{}
	}
}
