package main

import (
	"fmt"
	"io"
)

func init() {
	register(scene{order: 70, name: "metrics", title: "What operators see: the limits' Prometheus series at /metrics", run: metricsScene})
}

// metricsScene: the metrics module's demo, a limited HTTP handler beside
// /metrics on 127.0.0.1. It is a command of that module, so that this one
// does not depend on a Prometheus client; the scene runs it when it can.
func metricsScene(w io.Writer) error {
	fmt.Fprintln(w, "  The metrics module exports to Prometheus what the limits decided: httplimit's decisions")
	fmt.Fprintln(w, "  by policy and outcome, and how long they took, from its hook; each limiter's keys from")
	fmt.Fprintln(w, "  its Stats. A module of its own, so that this one needs no Prometheus client.")
	return otherDemo(w, "metrics", "./cmd/metrics-demo", "a Prometheus client")
}
