package grpclimit

import (
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzServerDelay feeds the client the delays a hostile server may send: a
// RetryInfo of any seconds and nanoseconds, an Any of any type URL and
// bytes, and grpc-retry-pushback-ms values of any text. The delay read is
// never negative nor above MaxPause, and never panics; when the raw Any is
// not a RetryInfo, it is exactly what a plain model says: the larger of the
// RetryInfo (valid if not negative, nanoseconds within a second) and the
// pushback (one value, a non-negative decimal of at most 32 bytes), cut to
// MaxPause.
func FuzzServerDelay(f *testing.F) {
	retryInfo := func(d time.Duration) []byte {
		b, err := proto.Marshal(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		if err != nil {
			panic(err)
		}
		return b
	}
	f.Add(int64(1), int32(500), "type.googleapis.com/google.rpc.RetryInfo", retryInfo(3*time.Second), "1500", "")
	f.Add(int64(-1), int32(0), "google.rpc.RetryInfo", []byte{0x0a, 0x02, 0x08}, "-1", "")
	f.Add(int64(math.MaxInt64), int32(999_999_999), "x/google.rpc.DebugInfo", []byte("garbage"), "99999999999999999999", "1")
	f.Add(int64(0), int32(-5), "", []byte{}, "+7", "")
	f.Add(int64(5), int32(1e9), "/google.rpc.RetryInfo", retryInfo(-time.Second), "007", "8")

	const maxPause = time.Hour
	f.Fuzz(func(t *testing.T, secs int64, nanos int32, url string, raw []byte, push1, push2 string) {
		typed, err := anypb.New(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: secs, Nanos: nanos}})
		require.NoError(t, err)
		p := status.New(codes.ResourceExhausted, "refused").Proto()
		p.Details = append(p.Details, typed, &anypb.Any{TypeUrl: url, Value: raw})
		var pushback []string
		for _, v := range []string{push1, push2} {
			if v != "" {
				pushback = append(pushback, v)
			}
		}

		d, ok := serverDelay(status.FromProto(p), metadata.MD{pushbackKey: pushback}, maxPause)
		require.True(t, d >= 0 && d <= maxPause, "delay %v outside [0, %v]", d, maxPause)
		if !ok {
			require.Zero(t, d)
		}

		want, wantOK := big.NewInt(-1), false
		if secs >= 0 && nanos >= 0 && nanos < 1e9 {
			want.Add(new(big.Int).Mul(big.NewInt(secs), big.NewInt(1e9)), big.NewInt(int64(nanos)))
			wantOK = true
		}
		if len(pushback) == 1 && len(pushback[0]) <= 32 {
			if ms, parsed := new(big.Int).SetString(pushback[0], 10); parsed && ms.Sign() >= 0 {
				ms.Mul(ms, big.NewInt(1e6))
				if ms.Cmp(want) > 0 {
					want = ms
				}
				wantOK = true
			}
		}
		if want.Cmp(big.NewInt(int64(maxPause))) > 0 {
			want.SetInt64(int64(maxPause))
		}
		isRetryInfo := len(url) >= len(retryInfoName) && url[len(url)-len(retryInfoName):] == retryInfoName
		if isRetryInfo {
			// The raw Any may hold a larger valid RetryInfo too.
			require.True(t, ok || !wantOK, "a valid delay was missed")
			if wantOK {
				require.GreaterOrEqual(t, int64(d), want.Int64())
			}
			return
		}
		require.Equal(t, wantOK, ok, "whether there is a delay")
		if ok {
			require.Equal(t, want.Int64(), int64(d))
		}
	})
}
