package extprocserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// client dials s and returns an ExternalProcessor client, closed when the
// test ends.
func client(t *testing.T, s *Server) extprocpb.ExternalProcessorClient {
	t.Helper()
	cc, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return extprocpb.NewExternalProcessorClient(cc)
}

// open starts a stream on a new client of s, with metadata kv, ended when
// the test ends.
func open(t *testing.T, s *Server, kv ...string) extprocpb.ExternalProcessor_ProcessClient {
	t.Helper()
	ctx, cancel := context.WithCancel(testutils.Context(t))
	t.Cleanup(cancel)
	stream, err := client(t, s).Process(metadata.AppendToOutgoingContext(ctx, kv...))
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func headersReq(event Event, kv ...string) *extprocpb.ProcessingRequest {
	hm := &corepb.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corepb.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	h := &extprocpb.HttpHeaders{Headers: hm}
	switch event {
	case RequestHeaders:
		return &extprocpb.ProcessingRequest{Request: &extprocpb.ProcessingRequest_RequestHeaders{RequestHeaders: h}}
	case ResponseHeaders:
		return &extprocpb.ProcessingRequest{Request: &extprocpb.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}}
	case ResponseTrailers:
		return &extprocpb.ProcessingRequest{Request: &extprocpb.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocpb.HttpTrailers{Trailers: hm},
		}}
	}
	panic(event)
}

func bodyReq(event Event, body string, eos, withoutMessage bool) *extprocpb.ProcessingRequest {
	b := &extprocpb.HttpBody{Body: []byte(body), EndOfStream: eos, EndOfStreamWithoutMessage: withoutMessage}
	if event == RequestBody {
		return &extprocpb.ProcessingRequest{Request: &extprocpb.ProcessingRequest_RequestBody{RequestBody: b}}
	}
	return &extprocpb.ProcessingRequest{Request: &extprocpb.ProcessingRequest_ResponseBody{ResponseBody: b}}
}

func send(t *testing.T, stream extprocpb.ExternalProcessor_ProcessClient, req *extprocpb.ProcessingRequest) {
	t.Helper()
	if err := stream.Send(req); err != nil {
		t.Fatalf("Send(%v): %v", EventOf(req), err)
	}
}

func recv(t *testing.T, stream extprocpb.ExternalProcessor_ProcessClient) *extprocpb.ProcessingResponse {
	t.Helper()
	r, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return r
}

// exchange sends req and checks that the next response is want.
func exchange(t *testing.T, stream extprocpb.ExternalProcessor_ProcessClient, req *extprocpb.ProcessingRequest, want *extprocpb.ProcessingResponse) {
	t.Helper()
	send(t, stream, req)
	if diff := cmp.Diff(want, recv(t, stream), protocmp.Transform()); diff != "" {
		t.Fatalf("response to %v (-want +got):\n%s", EventOf(req), diff)
	}
}

// recvEnd checks that the stream ends with code (io.EOF for OK).
func recvEnd(t *testing.T, stream extprocpb.ExternalProcessor_ProcessClient, code codes.Code) {
	t.Helper()
	r, err := stream.Recv()
	if code == codes.OK {
		if err != io.EOF {
			t.Fatalf("Recv = %v, %v; want the end of the stream with OK", r, err)
		}
		return
	}
	if status.Code(err) != code {
		t.Fatalf("Recv = %v, %v; want the end of the stream with %v", r, err, code)
	}
}

func TestPassThrough(t *testing.T) {
	ctx := testutils.Context(t)
	s := Start(t, PassThrough())
	stream := open(t, s, "x-initial", "v1", "x-initial", "v2")

	steps := []struct {
		req  *extprocpb.ProcessingRequest
		want *extprocpb.ProcessingResponse
	}{
		{headersReq(RequestHeaders, ":path", "/s/m"), HeaderMutationResponse(RequestHeaders, nil)},
		{bodyReq(RequestBody, "m1", false, false), BodyResponse(RequestBody, []byte("m1"), false, false)},
		{bodyReq(RequestBody, "", false, false), BodyResponse(RequestBody, nil, false, false)},
		{bodyReq(RequestBody, "m2", true, false), BodyResponse(RequestBody, []byte("m2"), true, false)},
		{headersReq(ResponseHeaders, ":status", "200"), HeaderMutationResponse(ResponseHeaders, nil)},
		{bodyReq(ResponseBody, "r1", false, false), BodyResponse(ResponseBody, []byte("r1"), false, false)},
		{headersReq(ResponseTrailers, "grpc-status", "0"), HeaderMutationResponse(ResponseTrailers, nil)},
	}
	for _, st := range steps {
		exchange(t, stream, st.req, st.want)
	}
	// A request in observability mode, and one with no event, are not
	// answered: the next response is the one to the half-close.
	obs := bodyReq(ResponseBody, "r2", false, false)
	obs.ObservabilityMode = true
	send(t, stream, obs)
	send(t, stream, &extprocpb.ProcessingRequest{ClientWindowUpdate: &extprocpb.ProcessingRequest_ClientWindowUpdate{}})
	exchange(t, stream, bodyReq(RequestBody, "", true, true), BodyResponse(RequestBody, nil, true, true))
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	recvEnd(t, stream, codes.OK)

	recs, err := s.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := recs[0]
	if got := r.Metadata.Get("x-initial"); !cmp.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("metadata x-initial = %q, want [v1 v2]", got)
	}
	wantEvents := []Event{RequestHeaders, RequestBody, RequestBody, RequestBody, ResponseHeaders, ResponseBody, ResponseTrailers, ResponseBody, "", RequestBody}
	if diff := cmp.Diff(wantEvents, r.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got := HeaderValues(HeadersOf(r.Requests[0]), ":path"); !cmp.Equal(got, []string{"/s/m"}) {
		t.Errorf(":path = %q, want [/s/m]", got)
	}
	if len(r.Responses) != len(steps)+1 {
		t.Errorf("%d responses recorded, want %d", len(r.Responses), len(steps)+1)
	}
	if !r.HalfClosed || !r.Ended || r.Status.Code() != codes.OK {
		t.Errorf("record: half-closed %v, ended %v, status %v; want true, true, OK", r.HalfClosed, r.Ended, r.Status)
	}
	if s.Conns() != 1 {
		t.Errorf("Conns() = %d, want 1", s.Conns())
	}
}

func TestNilHandlerIsPassThrough(t *testing.T) {
	s := Start(t, nil)
	stream := open(t, s)
	exchange(t, stream, headersReq(RequestHeaders), HeaderMutationResponse(RequestHeaders, nil))
}

func TestSetAndRemoveHeaders(t *testing.T) {
	s := Start(t, PerEvent(map[Event]Handler{
		RequestHeaders:   SetHeaders(RequestHeaders, "x-a", "1", "x-b", "2"),
		ResponseTrailers: RemoveHeaders(ResponseTrailers, "x-c"),
	}))
	stream := open(t, s)
	set := &extprocpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{
		SetHeader("x-a", "1", corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
		SetHeader("x-b", "2", corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
	}}
	exchange(t, stream, headersReq(RequestHeaders), HeaderMutationResponse(RequestHeaders, set))
	got := recvAfter(t, stream, headersReq(RequestHeaders))
	if m := got.GetRequestHeaders().GetResponse().GetHeaderMutation(); len(m.GetSetHeaders()) != 2 ||
		string(m.GetSetHeaders()[1].GetHeader().GetRawValue()) != "2" {
		t.Errorf("second response = %v, want the same mutation", got)
	}
	exchange(t, stream, headersReq(ResponseHeaders), HeaderMutationResponse(ResponseHeaders, nil))
	exchange(t, stream, headersReq(ResponseTrailers), HeaderMutationResponse(ResponseTrailers, &extprocpb.HeaderMutation{RemoveHeaders: []string{"x-c"}}))
}

func recvAfter(t *testing.T, stream extprocpb.ExternalProcessor_ProcessClient, req *extprocpb.ProcessingRequest) *extprocpb.ProcessingResponse {
	t.Helper()
	send(t, stream, req)
	return recv(t, stream)
}

func TestMutateResponseBodies(t *testing.T) {
	s := Start(t, MutateResponseBodies(func(b []byte) [][]byte {
		switch string(b) {
		case "drop":
			return nil
		case "split":
			return [][]byte{[]byte("a"), []byte("b")}
		}
		return [][]byte{bytes.ToUpper(b)}
	}))
	stream := open(t, s)
	exchange(t, stream, bodyReq(RequestBody, "x", false, false), BodyResponse(RequestBody, []byte("x"), false, false))
	exchange(t, stream, bodyReq(ResponseBody, "x", false, false), BodyResponse(ResponseBody, []byte("X"), false, false))
	send(t, stream, bodyReq(ResponseBody, "drop", false, false))
	send(t, stream, bodyReq(ResponseBody, "split", false, false))
	for _, want := range []string{"a", "b"} {
		if diff := cmp.Diff(BodyResponse(ResponseBody, []byte(want), false, false), recv(t, stream), protocmp.Transform()); diff != "" {
			t.Fatalf("response to split (-want +got):\n%s", diff)
		}
	}
}

func TestMutateRequestBodiesEndOfStream(t *testing.T) {
	s := Start(t, MutateBodies(RequestBody, func(b []byte) [][]byte {
		if string(b) == "drop" {
			return nil
		}
		return [][]byte{b, b}
	}))
	stream := open(t, s)
	// The last message carries the half-close.
	send(t, stream, bodyReq(RequestBody, "m", true, false))
	for _, want := range []*extprocpb.ProcessingResponse{
		BodyResponse(RequestBody, []byte("m"), false, false),
		BodyResponse(RequestBody, []byte("m"), true, false),
	} {
		if diff := cmp.Diff(want, recv(t, stream), protocmp.Transform()); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	}
	// A dropped message's half-close comes without a message, as does a
	// half-close without a message.
	exchange(t, stream, bodyReq(RequestBody, "drop", true, false), BodyResponse(RequestBody, nil, true, true))
	exchange(t, stream, bodyReq(RequestBody, "", true, true), BodyResponse(RequestBody, nil, true, true))
}

func TestImmediate(t *testing.T) {
	s := Start(t, Immediate(ResponseHeaders, codes.PermissionDenied, "no"))
	stream := open(t, s)
	exchange(t, stream, headersReq(RequestHeaders), HeaderMutationResponse(RequestHeaders, nil))
	got := recvAfter(t, stream, headersReq(ResponseHeaders))
	ir := got.GetImmediateResponse()
	if codes.Code(ir.GetGrpcStatus().GetStatus()) != codes.PermissionDenied || ir.GetDetails() != "no" {
		t.Errorf("response = %v, want an immediate_response of PermissionDenied, %q", got, "no")
	}
	if err := ir.Validate(); err != nil {
		t.Errorf("immediate_response does not validate: %v", err)
	}
}

func TestFail(t *testing.T) {
	ctx := testutils.Context(t)
	s := Start(t, PerEvent(map[Event]Handler{RequestBody: Fail(codes.ResourceExhausted)}))
	stream := open(t, s)
	exchange(t, stream, headersReq(RequestHeaders), HeaderMutationResponse(RequestHeaders, nil))
	send(t, stream, bodyReq(RequestBody, "m", false, false))
	recvEnd(t, stream, codes.ResourceExhausted)
	recs, err := s.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := recs[0].Status.Code(); got != codes.ResourceExhausted {
		t.Errorf("recorded status %v, want ResourceExhausted", got)
	}
	if recs[0].HalfClosed {
		t.Error("recorded a half-close the client did not send")
	}
}

func TestCloseOK(t *testing.T) {
	ctx := testutils.Context(t)
	s := Start(t, CloseOK())
	stream := open(t, s)
	send(t, stream, headersReq(RequestHeaders))
	recvEnd(t, stream, codes.OK)
	recs, err := s.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs[0].Requests) != 1 || recs[0].Status.Code() != codes.OK || len(recs[0].Responses) != 0 {
		t.Errorf("record = %+v, want 1 request, no response, OK", recs[0])
	}
}

func TestHangRecordsAndEndsWithTheClient(t *testing.T) {
	ctx := testutils.Context(t)
	s := Start(t, Hang())
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client(t, s).Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	send(t, stream, headersReq(RequestHeaders))
	send(t, stream, bodyReq(RequestBody, "m", false, false))
	// The second request is recorded although the first is never answered.
	if _, err := s.WaitRequests(ctx, 0, 2); err != nil {
		t.Fatal(err)
	}
	cancel()
	recs, err := s.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := recs[0].Status.Code(); got != codes.Canceled {
		t.Errorf("recorded status %v, want Canceled", got)
	}
	if len(recs[0].Responses) != 0 {
		t.Errorf("%d responses sent, want none", len(recs[0].Responses))
	}
}

func TestHangEndsOnStop(t *testing.T) {
	ctx := testutils.Context(t)
	s := Start(t, Hang())
	stream := open(t, s)
	send(t, stream, headersReq(RequestHeaders))
	if _, err := s.WaitRequests(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	s.Stop() // returns: the Handler and the receiving goroutine have ended
	s.Stop()
	recvEnd(t, stream, codes.Unavailable)
	recs := s.Streams()
	if !recs[0].Ended {
		t.Error("stream not recorded as ended after Stop")
	}
	// A new stream fails: nothing listens any more.
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if st, err := client(t, s).Process(sctx); err == nil {
		if _, err := st.Recv(); err == nil {
			t.Error("a stream to a stopped server received a response")
		}
	}
}

func TestHalfCloseBeforeAnswersEndsAfterThem(t *testing.T) {
	// The client half-closes while its requests wait for the Handler:
	// they are still answered, then the stream ends with OK.
	release := make(chan struct{})
	s := Start(t, func(s *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		if s.N == 0 {
			select {
			case <-release:
			case <-s.Context().Done():
				return nil, s.Context().Err()
			}
		}
		return []*extprocpb.ProcessingResponse{ContinueResponse(req)}, nil
	})
	ctx := testutils.Context(t)
	stream := open(t, s)
	send(t, stream, headersReq(RequestHeaders))
	send(t, stream, bodyReq(RequestBody, "m", true, false))
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, func(recs []StreamRecord) bool { return len(recs) == 1 && recs[0].HalfClosed }); err != nil {
		t.Fatal(err)
	}
	close(release)
	recv(t, stream)
	recv(t, stream)
	recvEnd(t, stream, codes.OK)
}

func TestRawAndStreamState(t *testing.T) {
	// Raw sends what it is given; a Handler's Data persists per stream.
	s := Start(t, func(s *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		n, _ := s.Data.(int)
		s.Data = n + 1
		if n == 2 {
			return nil, ErrCloseOK
		}
		return Raw(func(req *extprocpb.ProcessingRequest) []*extprocpb.ProcessingResponse {
			return []*extprocpb.ProcessingResponse{ImmediateResponse(codes.Code(n+1), fmt.Sprint(s.Index)), nil}
		})(s, req)
	})
	for i := range 2 {
		stream := open(t, s)
		for n := range 2 {
			got := recvAfter(t, stream, headersReq(RequestHeaders))
			if c := got.GetImmediateResponse().GetGrpcStatus().GetStatus(); c != uint32(n+1) {
				t.Errorf("stream %d response %d: grpc_status %d, want %d", i, n, c, n+1)
			}
			if d := got.GetImmediateResponse().GetDetails(); d != fmt.Sprint(i) {
				t.Errorf("stream %d: Index %s, want %d", i, d, i)
			}
		}
		send(t, stream, headersReq(RequestHeaders))
		recvEnd(t, stream, codes.OK)
	}
}

func TestConcurrentStreamsAndSetHandler(t *testing.T) {
	ctx := testutils.Context(t)
	s := Start(t, PassThrough())
	c := client(t, s)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, err := c.Process(metadata.AppendToOutgoingContext(ctx, "i", fmt.Sprint(i)))
			if err != nil {
				errs <- err
				return
			}
			for range 3 {
				if err := stream.Send(headersReq(RequestHeaders)); err != nil {
					errs <- err
					return
				}
				if _, err := stream.Recv(); err != nil {
					errs <- err
					return
				}
			}
			stream.CloseSend()
			if _, err := stream.Recv(); err != io.EOF {
				errs <- fmt.Errorf("end of stream: %v", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	recs, err := s.WaitEnded(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Metadata.Get("i")[0]] = true
		if len(r.Requests) != 3 || len(r.Responses) != 3 {
			t.Errorf("stream %v: %d requests, %d responses; want 3, 3", r.Metadata.Get("i"), len(r.Requests), len(r.Responses))
		}
	}
	if len(seen) != n {
		t.Errorf("metadata of %d distinct streams recorded, want %d", len(seen), n)
	}
	if len(s.Requests()) != n {
		t.Errorf("Requests() has %d streams, want %d", len(s.Requests()), n)
	}

	s.SetHandler(Fail(codes.Internal))
	stream := open(t, s)
	send(t, stream, headersReq(RequestHeaders))
	recvEnd(t, stream, codes.Internal)
}

func TestWaitTimesOut(t *testing.T) {
	s := Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := s.WaitStreams(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitStreams = %v, want a DeadlineExceeded error", err)
	}
}

func TestResponseBuildersPanicOnWrongEvents(t *testing.T) {
	for name, f := range map[string]func(){
		"BodyResponse":           func() { BodyResponse(RequestHeaders, nil, false, false) },
		"HeaderMutationResponse": func() { HeaderMutationResponse(RequestBody, nil) },
		"MutateBodies":           func() { MutateBodies(ResponseHeaders, nil) },
		"MutateHeaders":          func() { MutateHeaders(ResponseBody, nil) },
		"SetHeaders":             func() { SetHeaders(RequestHeaders, "k") },
		"Immediate":              func() { Immediate("", codes.Internal, "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// The builders' answers are valid protos.
func TestResponsesValidate(t *testing.T) {
	for _, r := range []*extprocpb.ProcessingResponse{
		ImmediateResponse(codes.Internal, "x"),
		BodyResponse(ResponseBody, []byte("b"), false, false),
		HeaderMutationResponse(RequestHeaders, &extprocpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{SetHeader("k", "v", corepb.HeaderValueOption_ADD_IF_ABSENT)}}),
		HeaderMutationResponse(ResponseTrailers, nil),
	} {
		if err := r.ValidateAll(); err != nil {
			t.Errorf("%v: %v", r, err)
		}
		if _, err := proto.Marshal(r); err != nil {
			t.Errorf("%v: %v", r, err)
		}
	}
}
