// Package transports checks, with the conformance package's independent
// parser, every rate-limit field httplimit's middleware and grpclimit's
// interceptors write, in every scenario of conformance.Scenarios. It has
// tests only; gRPC is kept out of the conformance package, whose fuzz test
// binary is built with fuzzing's instrumentation.
package transports
