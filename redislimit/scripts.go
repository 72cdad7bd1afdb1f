package redislimit

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per algorithm, each made of lua/prelude.lua (the
// arguments, Redis time, the reply) and the algorithm's own file, all
// commented. Each decision is one call of one script: EVALSHA, and EVAL
// once if the server does not know the script yet (a new or restarted
// server), which is what redis.Script.Run does.
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/bucket.lua
	bucketLua string
	//go:embed lua/fixed.lua
	fixedLua string
	//go:embed lua/sliding.lua
	slidingLua string

	bucketScript  = redis.NewScript(preludeLua + bucketLua)
	fixedScript   = redis.NewScript(preludeLua + fixedLua)
	slidingScript = redis.NewScript(preludeLua + slidingLua)
)

// The modes every script takes as ARGV[1], boxed once so that passing one to
// the client as an argument does not allocate.
var (
	modeTake   any = "take"
	modePeek   any = "peek"
	modeRefund any = "refund"
)
