// Command benchreport writes BENCHMARKS.md: the BenchmarkAllow tables read
// from `go test -bench` output, with the ratios of keylimit to the floor and
// to the best peer on every row; the admissions of each contender on one hot
// key under contention; and the heap each keeps per key. benchmarks/run.sh
// runs it; see there for the whole sequence.
//
// It measures memory in a fresh process per contender and measurement
// (itself, run with -memory NAME), so that no contender's garbage or
// background goroutines weigh on another's figure. To measure one contender
// by hand, with its keys held, then once they have gone idle:
//
//	go run ./cmd/benchreport -memory keylimit-bucket -keys 1000000
//	go run ./cmd/benchreport -memory keylimit-bucket -keys 1000000 -idle
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/keylimit/keylimit/benchmarks"
)

func main() {
	var (
		benchFile   = flag.String("bench", "", "`file` of go test -bench output for BenchmarkAllow, one or more rounds")
		out         = flag.String("out", "", "`file` to write the report to (default: standard output)")
		memoryOf    = flag.String("memory", "", "measure the memory of the contender `name` only, and print it as JSON")
		idle        = flag.Bool("idle", false, "with -memory: measure once the keys have gone idle")
		keys        = flag.Int("keys", benchmarks.MaxKeys, "distinct keys for the memory measurement")
		rounds      = flag.Int("rounds", 5, "rounds of each contention count")
		commands    = flag.String("commands", "", "`file` holding the commands that made the report, to publish with it")
		conditions  = flag.String("conditions", "", "`file` saying how busy the machine was, to publish with it")
		profiles    = flag.String("profiles", "", "`directory` of pprof -top outputs (*.txt) to publish")
		notes       = flag.String("notes", "", "`file` of notes to publish at the end, verbatim")
		skipContend = flag.Bool("skip-contention", false, "leave out the contention counts")
		skipMemory  = flag.Bool("skip-memory", false, "leave out the memory measurement")
	)
	flag.Parse()
	if *memoryOf != "" {
		if err := printMemory(*memoryOf, *keys, *idle); err != nil {
			fail(err)
		}
		return
	}

	rep := report{keys: *keys}
	var err error
	if *benchFile != "" {
		f, err := os.Open(*benchFile)
		if err != nil {
			fail(err)
		}
		results, err := parseBench(f)
		f.Close()
		if err != nil {
			fail(err)
		}
		rep.speeds = bySpeed(results)
	}
	if !*skipContend {
		rep.contention = contendAll(*rounds)
	}
	if !*skipMemory {
		if rep.memory, err = measureAll(*keys); err != nil {
			fail(err)
		}
	}
	if rep.commands, err = readOptional(*commands); err != nil {
		fail(err)
	}
	if rep.conditions, err = readOptional(*conditions); err != nil {
		fail(err)
	}
	if rep.notes, err = readOptional(*notes); err != nil {
		fail(err)
	}
	if *profiles != "" {
		if rep.profiles, err = readProfiles(*profiles); err != nil {
			fail(err)
		}
	}
	rep.machine = describeMachine()

	var buf bytes.Buffer
	rep.write(&buf)
	if *out == "" {
		os.Stdout.Write(buf.Bytes())
		return
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func readOptional(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

// memoryPoll and memoryMaxWait pace the wait for idle keys to be evicted.
const (
	memoryPoll    = 100 * time.Millisecond
	memoryMaxWait = 20 * time.Second
)

// memory is what a child process measured: bytes per key with every key
// held, or once the keys went idle (and how long that wait took).
type memory struct {
	PerKey float64
	Waited time.Duration
}

// printMemory measures one contender and prints the result as JSON.
func printMemory(name string, keys int, idle bool) error {
	c, err := benchmarks.Lookup(name)
	if err != nil {
		return err
	}
	var m memory
	if idle {
		m.PerKey, m.Waited, err = benchmarks.HeapPerKeyOnceIdle(c, keys, memoryPoll, memoryMaxWait)
	} else {
		m.PerKey, err = benchmarks.HeapPerKey(c, keys)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(m)
}

// memoryFigures are a contender's two measurements; idle is nil for a
// contender that cannot evict.
type memoryFigures struct {
	held memory
	idle *memory
}

// measureAll measures every contender, each measurement in a process of its
// own.
func measureAll(keys int) (map[string]memoryFigures, error) {
	out := make(map[string]memoryFigures)
	for _, c := range benchmarks.Contenders() {
		var f memoryFigures
		var err error
		if f.held, err = measureInChild(c.Name, keys, false); err != nil {
			return nil, err
		}
		if c.Evicts != "" {
			idle, err := measureInChild(c.Name, keys, true)
			if err != nil {
				return nil, err
			}
			f.idle = &idle
		}
		out[c.Name] = f
	}
	return out, nil
}

func measureInChild(name string, keys int, idle bool) (memory, error) {
	self, err := os.Executable()
	if err != nil {
		return memory{}, err
	}
	fmt.Fprintf(os.Stderr, "benchreport: memory of %s at %d keys, idle %v\n", name, keys, idle)
	cmd := exec.Command(self, "-memory", name, "-keys", fmt.Sprint(keys), fmt.Sprintf("-idle=%v", idle))
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return memory{}, fmt.Errorf("benchreport: measuring %s: %v", name, err)
	}
	var m memory
	if err := json.Unmarshal(b, &m); err != nil {
		return memory{}, fmt.Errorf("benchreport: measuring %s: %v", name, err)
	}
	return m, nil
}
