package e2e_test

import (
	"context"
	"testing"
	"time"

	pm "github.com/proxyless-grpc/xds/internal/testutils/pipelinemodel"
)

// pfRegressions are the differences the pipeline fuzzer found between the
// real server and the model, each as the case it shrank to, replayed on
// every test run (TestPipelineRegressions): each is a bug that was fixed in
// the server.
var pfRegressions = []struct {
	name string
	c    pm.Case
}{
	// A rate limit header_value_match on a binary header sent twice saw
	// only the first value, so a client chose what was matched by
	// repeating the header; Envoy matches every value joined with ",".
	// Here the match fails, so no descriptor and no call.
	{name: "BinaryHeaderSentTwice", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{{Name: "rl", RateLimit: &pm.GlobalRL{Domain: "d"}}},
			Routes: []pm.Route{{Prefix: "/", Overrides: map[string]*pm.Override{"rl": {RateLimit: &pm.RateLimitPerRoute{RateLimits: []pm.RateLimit{{Actions: []pm.Action{
				{Header: pm.IDHeader, Key: "rpc"},
				{Match: &pm.HeaderValueMatch{Value: "m", Headers: []pm.HeaderMatch{{Name: "x-data-bin", Kind: "exact", Value: "AAE"}}}},
			}}}}}}}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodUnary, Authority: pm.Domain, Headers: []pm.Header{{Key: "x-data-bin", Value: "\x00\x01"}, {Key: "x-data-bin", Value: "\x01\x02"}}}},
	}},
	// A fault abort with status OK ended a client-streaming RPC without
	// the one response message its client expects, which the client
	// reported as INTERNAL; a unary RPC got an empty message and OK, and
	// now so does a client-streaming one.
	{name: "FaultAbortOKClientStreaming", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{{Name: "fault", Fault: &pm.Fault{Abort: &pm.FaultAbort{GRPC: new(int), Pct: 100}}}},
			Routes:  []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodClientStream, Authority: pm.Domain}, {Method: pm.MethodUnary, Authority: pm.Domain}},
	}},
}

// TestPipelineRegressions replays pfRegressions through the real server
// and holds it to the model.
func TestPipelineRegressions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := startPFFixture(ctx, t)
	for _, tc := range pfRegressions {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Env = f.env
			if diff := f.run(ctx, t, c); diff != "" {
				f.fail(ctx, t, tc.name, c, diff)
			}
		})
	}
}
