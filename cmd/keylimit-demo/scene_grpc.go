package main

import (
	"fmt"
	"io"
)

func init() {
	register(scene{order: 60, name: "grpc", title: "gRPC both ways: grpclimit's server and client interceptors over loopback", run: grpcScene})
}

// grpcScene: the grpclimit module's demo, a real gRPC server and clients on
// 127.0.0.1. It is a command of that module, so that this one does not
// depend on gRPC; the scene runs it when it can.
func grpcScene(w io.Writer) error {
	fmt.Fprintln(w, "  The same limits for gRPC, in the grpclimit module: its server interceptors refuse a")
	fmt.Fprintln(w, "  call with ResourceExhausted and a RetryInfo delay, and send the RateLimit fields as")
	fmt.Fprintln(w, "  metadata; its client interceptors (grpclimit.Client) wait that delay out and pace a")
	fmt.Fprintln(w, "  burst. A module of its own, so that this one needs no gRPC.")
	return otherDemo(w, "grpclimit", "./cmd/grpc-demo", "gRPC")
}
