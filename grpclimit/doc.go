// Package grpclimit rate-limits gRPC with keylimit, on both sides: server
// interceptors that refuse calls the way gRPC clients act on, and client
// interceptors that keep a client under a server's limit.
//
// # Servers
//
//	limits, err := grpclimit.NewServer(grpclimit.Config{
//		Key:      grpclimit.ClientIP{}.Key,
//		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(60))},
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(limits.UnaryInterceptor()),
//		grpc.ChainStreamInterceptor(limits.StreamInterceptor()),
//	)
//
// Config.Key names the client a call counts against: its address
// (ClientIP, with httplimit's trusted-proxy rules for x-forwarded-for and
// forwarded metadata), a metadata key such as an API key (Metadata), the
// full method name (Method), a combination (Join), or any function of the
// call's context and method. Each call meets one or more named policies,
// all or nothing, in any keylimit.Limiter[string]; the Config is
// httplimit.Config's, for calls: tiers, costs, skips, a dry run, a hook on
// every decision.
//
// A refused call ends with codes.ResourceExhausted, and a
// google.rpc.RetryInfo detail carrying the delay after which it can pass
// (RetryDelay reads it), the convention of Google APIs and gRPC clients.
// The trailer metadata grpc-retry-pushback-ms carries the same delay in
// milliseconds. A refused call sends no header metadata, so that it is a
// Trailers-Only answer: the only refusal gRPC's own retry policy retries
// (grpc-go retries none once headers have come), and it does, after the
// pushback, for a client whose service config has a retryPolicy with
// RESOURCE_EXHAUSTED among its retryableStatusCodes. A call whose key the
// limiter cannot track (keylimit.WithMaxKeys) ends with Unavailable, and so
// does one an adaptive concurrency policy sheds (quota.Decision.Shed), with
// its RetryInfo and pushback, which grpc-go retries for a client whose
// retryPolicy lists UNAVAILABLE; one
// whose cost is above a quota, without RetryInfo and with pushback -1 (do
// not retry).
//
// Every call counted, admitted or refused, gets the IETF rate-limit fields
// in the format httplimit sends them: an admitted call as header metadata,
// a refused one as trailer metadata, beside the pushback:
//
//	ratelimit-policy: "minute";q=60;w=60
//	ratelimit: "minute";r=0;t=42
//	retry-after: 1                  (refused calls only; whole seconds)
//
// A call is decided by a quota.Decider, the transport-neutral core
// httplimit's middleware decides requests with: HTTP and gRPC clients meet
// the same policies, binding policy and fields, and neither transport's
// answer depends on the other's. A stream counts once, when it opens; its
// messages are not counted.
//
// # Clients
//
//	perSecond, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(10).WithBurst(1))
//	if err != nil {
//		log.Fatal(err)
//	}
//	pace := &grpclimit.Client{Limiter: perSecond}
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(pace.UnaryInterceptor()),
//		grpc.WithChainStreamInterceptor(pace.StreamInterceptor()),
//		grpc.WithTransportCredentials(creds))
//
// Before each call a Client waits for a token of its own Limiter under the
// call's key (the target by default, or Client.Key's), never past
// the call's deadline. A call that ends with ResourceExhausted or
// Unavailable and a RetryInfo detail or grpc-retry-pushback-ms pauses the
// key for every call through the Client until then (at most MaxPause).
// With Concurrency, a call also holds a slot of its key while it runs (a
// stream until it ends), and the rest queue for one under their context.
// A call the Client did not send ends with a *WaitError, whose gRPC status
// says why.
//
// With Throttle (2 is the usual value) a Client also throttles itself
// adaptively, per key, as httplimit.Transport does: it rejects a call
// locally, unsent, with probability max(0, (calls − 2 × accepts) /
// (calls + 1)) over its recent calls, so it stops hammering a server that
// refuses or fails, and comes back soon after it recovers; a rejected
// call's *WaitError matches ErrThrottled and has the status Unavailable.
// With an *adaptive.Limiter as Concurrency, a failed call gives its slot
// back by Permit.Drop, and the limit falls.
package grpclimit
