package redislimit

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per algorithm, each commented in its own file under
// lua/. Each decision is one call of one of them: EVALSHA, and EVAL once if
// the server does not know the script yet (a new or restarted server), which
// is what redis.Script.Run does.
var (
	//go:embed lua/bucket.lua
	bucketLua    string
	bucketScript = redis.NewScript(bucketLua)

	//go:embed lua/fixed.lua
	fixedLua    string
	fixedScript = redis.NewScript(fixedLua)

	//go:embed lua/sliding.lua
	slidingLua    string
	slidingScript = redis.NewScript(slidingLua)
)

// The modes every script takes as ARGV[1].
const (
	modeTake   = "take"
	modePeek   = "peek"
	modeRefund = "refund"
)

// modeArgs are the modes boxed once, so that passing one to the client as an
// argument does not allocate.
var modeArgs = map[string]any{modeTake: modeTake, modePeek: modePeek, modeRefund: modeRefund}
