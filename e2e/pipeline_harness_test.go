package e2e_test

// The harness of the pipeline property test (pipeline_fuzz_test.go): one
// management server, one xds.GRPCServer, a scriptable authorization server,
// rate limit service and ext_proc processor, all real and on loopback,
// started once per test process (or fuzz worker); a case of internal/testutils/pipelinemodel is
// turned into a Listener, pushed, and its RPCs run on a new connection,
// each observed from the client, the program's interceptors and handler,
// and the side services.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rlconfpb "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	procpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	xds "github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	pm "github.com/proxyless-grpc/xds/internal/testutils/pipelinemodel"
)

// --- the script filter: a public httpfilter the model knows ---

// The config types of the fuzzer's public filter: pfScriptURL declares
// Needs.After, pfLazyURL does not. The config (a TypedStruct) is a
// pipelinemodel.Script; an override replaces it.
const (
	pfScriptURL = "type.googleapis.com/xds_test.FuzzScript"
	pfLazyURL   = "type.googleapis.com/xds_test.FuzzLazyScript"
)

func init() {
	httpfilter.Register(pfScript{url: pfScriptURL, after: true})
	httpfilter.Register(pfScript{url: pfLazyURL})
}

type pfScript struct {
	url   string
	after bool
}

func (s pfScript) ConfigTypeURLs() []string   { return []string{s.url} }
func (s pfScript) OverrideTypeURLs() []string { return []string{s.url} }
func (s pfScript) Needs() httpfilter.Needs    { return httpfilter.Needs{After: s.after} }

func (pfScript) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	f := raw.Struct().GetFields()
	return &pm.Script{
		Require:    f["require"].GetStringValue(),
		Set:        f["set"].GetStringValue(),
		Work:       f["work"].GetBoolValue(),
		WorkSet:    f["workset"].GetStringValue(),
		WorkRefuse: int(f["workrefuse"].GetNumberValue()),
		Panic:      f["panic"].GetStringValue(),
	}, nil
}

func (s pfScript) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return s.ParseConfig(raw)
}

func (pfScript) BuildStep(_ string, cfg, override httpfilter.Config) (httpfilter.Step, error) {
	if override != nil {
		cfg = override
	}
	return pfScriptStep{cfg.(*pm.Script)}, nil
}

type pfScriptStep struct{ c *pm.Script }

func withSet(ctx context.Context, kv string) context.Context {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(k, v)
	return metadata.NewIncomingContext(ctx, md)
}

func (s pfScriptStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	if s.c.Panic == "run" {
		panic("script: panic in the step")
	}
	if k, v, ok := strings.Cut(s.c.Require, "="); ok {
		if got := rpc.Header.Get(k); len(got) == 0 || got[0] != v {
			return ctx, nil, status.Errorf(codes.Unauthenticated, "script: %s is %q, want %q", k, got, v)
		}
	}
	ctx = withSet(ctx, s.c.Set)
	if s.c.Work || s.c.Panic == "work" {
		return ctx, pfScriptWork{s.c}, nil
	}
	return ctx, nil, nil
}

type pfScriptWork struct{ c *pm.Script }

func (w pfScriptWork) RunAfter(ctx context.Context) (context.Context, error) {
	if w.c.Panic == "work" {
		panic("script: panic in the work")
	}
	ctx = withSet(ctx, w.c.WorkSet)
	if w.c.WorkRefuse != 0 {
		return ctx, status.Error(codes.Code(w.c.WorkRefuse), "script work refuses")
	}
	return ctx, nil
}

// --- what the server's user code sees ---

// pfSeen is what one RPC's user code saw.
type pfSeen struct {
	single, chained, handler bool
	singleMD, chainedMD      metadata.MD
	handlerMD                metadata.MD
}

// pfRecorder records, by RPC ID, what the program's interceptors and
// handler, and the side services, saw; and which RPCs the server is still
// running (a stats handler: Begin to End), and how many streams the
// processor still serves.
type pfRecorder struct {
	mu       sync.Mutex
	seen     map[string]*pfSeen
	calls    map[string][]pm.Call
	proc     map[string][]pm.ProcEvent
	inFlight map[string]int
	// procStreams are the processor's streams not ended; current is the
	// ID of the RPC being run: a processor stream that starts belongs to
	// it (the harness runs one RPC at a time, and waits for the streams
	// of one to end before the next).
	procStreams int
	procStarted int
	current     string
	// script are the answers and handler codes of the RPCs of the current
	// case, by ID; names maps the current case's filter instance names to
	// the model's.
	script map[string]*pm.RPC
	names  map[string]string
	// hung is told the ID of an RPC whose side call hangs.
	hung func(id string)
}

func newPFRecorder() *pfRecorder {
	return &pfRecorder{seen: map[string]*pfSeen{}, calls: map[string][]pm.Call{}, proc: map[string][]pm.ProcEvent{}, inFlight: map[string]int{}}
}

func idOf(md metadata.MD) string {
	if v := md.Get(pm.IDHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *pfRecorder) note(ctx context.Context, f func(*pfSeen, metadata.MD)) {
	md, _ := metadata.FromIncomingContext(ctx)
	id := idOf(md)
	if id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen[id]
	if s == nil {
		s = &pfSeen{}
		r.seen[id] = s
	}
	f(s, md)
}

func (r *pfRecorder) handlerCode(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rpc := r.script[idOf(md)]; rpc != nil && rpc.HandlerCode != 0 {
		return status.Error(codes.Code(rpc.HandlerCode), "handler refuses")
	}
	return nil
}

func (r *pfRecorder) serverOptions() []grpc.ServerOption {
	single := func(s *pfSeen, md metadata.MD) { s.single, s.singleMD = true, md }
	chained := func(s *pfSeen, md metadata.MD) { s.chained, s.chainedMD = true, md }
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			r.note(ctx, single)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			r.note(ss.Context(), single)
			return h(srv, ss)
		}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			r.note(ctx, chained)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			r.note(ss.Context(), chained)
			return h(srv, ss)
		}),
		grpc.StatsHandler(pfStats{r}),
	}
}

// pfStats tracks the RPCs the server runs (those the tap let through).
type pfStats struct{ r *pfRecorder }

type pfIDKey struct{}

func (pfStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (pfStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (pfStats) HandleConn(context.Context, stats.ConnStats) {}
func (s pfStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	switch st := st.(type) {
	case *stats.InHeader:
		if id := idOf(st.Header); id != "" {
			s.r.mu.Lock()
			s.r.inFlight[id]++
			s.r.mu.Unlock()
		}
	case *stats.End:
		md, _ := metadata.FromIncomingContext(ctx)
		if id := idOf(md); id != "" {
			s.r.mu.Lock()
			s.r.inFlight[id]--
			s.r.mu.Unlock()
		}
	}
}

// procQuiet waits until the processor has had no stream, and none has
// begun, for pfProcQuiet. An RPC that ended by its client's deadline or
// cancellation may still send events to a processor after it ended (a
// local reply through an ext_proc call whose stream was not open yet):
// they must reach the processor while that RPC is the current one.
func (r *pfRecorder) procQuiet(ctx context.Context) {
	last, since := -1, time.Now()
	for ctx.Err() == nil {
		r.mu.Lock()
		n, started := r.procStreams, r.procStarted
		r.mu.Unlock()
		if n != 0 || started != last {
			last, since = started, time.Now()
		} else if time.Since(since) >= pfProcQuiet {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pfProcQuiet is how long the processor stays idle after an RPC its
// client gave up on before the next one starts.
const pfProcQuiet = 50 * time.Millisecond

// busy returns the IDs of RPCs the server still runs, and the processor's
// streams not ended.
func (r *pfRecorder) busy() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, n := range r.inFlight {
		if n != 0 {
			ids = append(ids, fmt.Sprintf("%s(%d)", id, n))
		}
	}
	if r.procStreams != 0 {
		ids = append(ids, fmt.Sprintf("%d processor streams", r.procStreams))
	}
	return ids
}

// pfService is the grpc.testing.TestService of the fuzzed server: every
// call shape, each recording what its handler sees.
type pfService struct {
	testgrpc.UnimplementedTestServiceServer
	r *pfRecorder
}

func (s pfService) saw(ctx context.Context) error {
	s.r.note(ctx, func(seen *pfSeen, md metadata.MD) { seen.handler, seen.handlerMD = true, md })
	return s.r.handlerCode(ctx)
}

func (s pfService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := s.saw(ctx); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{}, nil
}

func (s pfService) StreamingInputCall(st testgrpc.TestService_StreamingInputCallServer) error {
	if err := s.saw(st.Context()); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return st.SendAndClose(&testpb.StreamingInputCallResponse{})
			}
			return err
		}
	}
}

func (s pfService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.saw(st.Context()); err != nil {
		return err
	}
	for range 2 {
		if err := st.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

func (s pfService) FullDuplexCall(st testgrpc.TestService_FullDuplexCallServer) error {
	if err := s.saw(st.Context()); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := st.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// --- the side services ---

// pfAuthz is the scriptable authorization server.
type pfAuthz struct {
	authpb.UnimplementedAuthorizationServer
	r *pfRecorder
}

// lookup records a side call of the RPC id by the filter instance named in
// md's x-filter, and returns the RPC's script and the model's name of the
// filter.
func (r *pfRecorder) lookup(ctx context.Context, id string, call pm.Call) (*pm.RPC, string) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	name := r.names[strings.Join(md.Get("x-filter"), ",")]
	if name == "" {
		name = "unknown filter " + strings.Join(md.Get("x-filter"), ",")
	}
	call.Filter = name
	r.calls[id] = append(r.calls[id], call)
	return r.script[id], name
}

func (r *pfRecorder) hang(ctx context.Context, id string) error {
	r.mu.Lock()
	hung := r.hung
	r.mu.Unlock()
	if hung != nil {
		hung(id)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (a pfAuthz) Check(ctx context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
	hm := map[string][]string{}
	for _, h := range req.GetAttributes().GetRequest().GetHttp().GetHeaderMap().GetHeaders() {
		hm[h.GetKey()] = append(hm[h.GetKey()], string(h.GetRawValue()))
	}
	id := ""
	if v := hm[pm.IDHeader]; len(v) > 0 {
		id = v[0]
	}
	rpc, name := a.r.lookup(ctx, id, pm.Call{HeaderMap: pm.Observe(hm)})
	var ans *pm.AuthzAnswer
	if rpc != nil {
		ans = rpc.Authz[name]
	}
	if ans == nil {
		ans = &pm.AuthzAnswer{Kind: "ok"}
	}
	switch ans.Kind {
	case "hang":
		return nil, a.r.hang(ctx, id)
	case "error":
		return nil, status.Error(codes.Code(ans.ErrCode), "scripted error")
	case "nostatus":
		// Tempting: a mutation without a status must not be applied.
		return &authpb.CheckResponse{HttpResponse: &authpb.CheckResponse_OkResponse{OkResponse: &authpb.OkHttpResponse{
			Headers: []*corepb.HeaderValueOption{{Header: &corepb.HeaderValue{Key: "x-user", Value: "nostatus"}, AppendAction: corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}}}}}, nil
	case "okdenied":
		return &authpb.CheckResponse{Status: &rpcstatuspb.Status{}, HttpResponse: &authpb.CheckResponse_DeniedResponse{DeniedResponse: &authpb.DeniedHttpResponse{}}}, nil
	case "deny":
		code := int32(ans.DenyCode)
		if code == 0 {
			code = int32(codes.PermissionDenied)
		}
		d := &authpb.DeniedHttpResponse{Headers: pfOptions(ans.DenyHeaders)}
		if ans.DenyHTTP != 0 {
			d.Status = &typepb.HttpStatus{Code: typepb.StatusCode(ans.DenyHTTP)}
		}
		return &authpb.CheckResponse{Status: &rpcstatuspb.Status{Code: code, Message: ans.DenyMessage}, HttpResponse: &authpb.CheckResponse_DeniedResponse{DeniedResponse: d}}, nil
	}
	resp := &authpb.CheckResponse{Status: &rpcstatuspb.Status{}}
	if !ans.NoOkResponse {
		resp.HttpResponse = &authpb.CheckResponse_OkResponse{OkResponse: &authpb.OkHttpResponse{
			Headers: pfOptions(ans.Headers), HeadersToRemove: ans.Remove, ResponseHeadersToAdd: pfOptions(ans.RespHeaders),
		}}
	}
	return resp, nil
}

func pfValue(h pm.HeaderOp) *corepb.HeaderValue {
	hv := &corepb.HeaderValue{Key: h.Key}
	switch {
	case h.Both:
		hv.Value, hv.RawValue = pm.BothIgnored, []byte(h.Value)
	case h.Raw:
		hv.RawValue = []byte(h.Value)
	default:
		hv.Value = h.Value
	}
	return hv
}

func pfOptions(hs []pm.HeaderOp) []*corepb.HeaderValueOption {
	var out []*corepb.HeaderValueOption
	for _, h := range hs {
		o := &corepb.HeaderValueOption{Header: pfValue(h), AppendAction: corepb.HeaderValueOption_HeaderAppendAction(h.Action), KeepEmptyValue: h.KeepEmpty}
		if h.Append != nil {
			o.Append = wrapperspb.Bool(*h.Append)
		}
		out = append(out, o)
	}
	return out
}

func pfValues(hs []pm.HeaderOp) []*corepb.HeaderValue {
	var out []*corepb.HeaderValue
	for _, h := range hs {
		out = append(out, pfValue(h))
	}
	return out
}

// pfRLS is the scriptable rate limit service.
type pfRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	r *pfRecorder
}

func (s pfRLS) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	var ds [][]pm.Header
	id := ""
	for _, d := range req.GetDescriptors() {
		var es []pm.Header
		for _, e := range d.GetEntries() {
			v := e.GetValue()
			if e.GetKey() == "rpc" && id == "" {
				id = v
			}
			if len(v) > 64 {
				v = fmt.Sprintf("<%d bytes>", len(v))
			}
			es = append(es, pm.Header{Key: e.GetKey(), Value: v})
		}
		ds = append(ds, es)
	}
	rpc, name := s.r.lookup(ctx, id, pm.Call{Domain: req.GetDomain(), Descriptors: ds})
	var ans *pm.RLSAnswer
	if rpc != nil {
		ans = rpc.RLS[name]
	}
	if ans == nil {
		ans = &pm.RLSAnswer{Kind: "ok"}
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, ResponseHeadersToAdd: pfValues(ans.ResponseHeaders)}
	switch ans.Kind {
	case "hang":
		return nil, s.r.hang(ctx, id)
	case "error":
		return nil, status.Error(codes.Code(ans.ErrCode), "scripted error")
	case "over":
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	case "unknown":
		resp.OverallCode = rlspb.RateLimitResponse_UNKNOWN
	default:
		resp.RequestHeadersToAdd = pfValues(ans.RequestHeaders)
	}
	return resp, nil
}

// pfProc is the scriptable ext_proc processor: it answers each event of a
// stream as the script of the stream's RPC says for the filter named in
// the stream's x-filter, and records the events it handles.
type pfProc struct {
	procpb.UnimplementedExternalProcessorServer
	r *pfRecorder
}

// pfProcStats counts the processor's streams not ended.
type pfProcStats struct{ r *pfRecorder }

func (pfProcStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (pfProcStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (pfProcStats) HandleConn(context.Context, stats.ConnStats) {}
func (s pfProcStats) HandleRPC(_ context.Context, st stats.RPCStats) {
	switch st.(type) {
	case *stats.Begin:
		s.r.mu.Lock()
		s.r.procStreams++
		s.r.procStarted++
		s.r.mu.Unlock()
	case *stats.End:
		s.r.mu.Lock()
		s.r.procStreams--
		s.r.mu.Unlock()
	}
}

func pfHeaderMapOf(hm *corepb.HeaderMap) map[string][]string {
	out := map[string][]string{}
	for _, h := range hm.GetHeaders() {
		v := string(h.GetRawValue())
		if v == "" {
			v = h.GetValue()
		}
		out[h.GetKey()] = append(out[h.GetKey()], v)
	}
	return out
}

func pfStatusOf(hm map[string][]string) *int {
	v := hm["grpc-status"]
	if len(v) != 1 {
		return nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil {
		n = -1
	}
	return &n
}

func (p pfProc) Process(st procpb.ExternalProcessor_ProcessServer) error {
	ctx := st.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	p.r.mu.Lock()
	id := p.r.current
	name := p.r.names[strings.Join(md.Get("x-filter"), ",")]
	if name == "" {
		name = "unknown filter " + strings.Join(md.Get("x-filter"), ",")
	}
	p.r.mu.Unlock()
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ev := pm.ProcEvent{Filter: name}
		switch x := req.GetRequest().(type) {
		case *procpb.ProcessingRequest_RequestHeaders:
			ev.Event = pm.EventRequestHeaders
			hm := pfHeaderMapOf(x.RequestHeaders.GetHeaders())
			delete(hm, ":authority")
			ev.Headers = pm.Observe(hm)
		case *procpb.ProcessingRequest_ResponseHeaders:
			ev.Event, ev.EndOfStream = pm.EventResponseHeaders, x.ResponseHeaders.GetEndOfStream()
			ev.Status = pfStatusOf(pfHeaderMapOf(x.ResponseHeaders.GetHeaders()))
		case *procpb.ProcessingRequest_ResponseTrailers:
			ev.Event = pm.EventResponseTrailers
			ev.Status = pfStatusOf(pfHeaderMapOf(x.ResponseTrailers.GetTrailers()))
		default:
			ev.Event = fmt.Sprintf("unexpected %T", x)
		}
		p.r.mu.Lock()
		p.r.proc[id] = append(p.r.proc[id], ev)
		rpc := p.r.script[id]
		p.r.mu.Unlock()
		var script *pm.ProcScript
		if rpc != nil {
			script = rpc.Proc[name]
		}
		a := script.Answer(ev.Event)
		var resp *procpb.ProcessingResponse
		switch a.Kind {
		case "hang":
			// No answer: until the filter half-closes the stream (its RPC
			// ended) or cancels it; what it sends meanwhile is not
			// recorded.
			p.r.mu.Lock()
			hung := p.r.hung
			p.r.mu.Unlock()
			if hung != nil {
				hung(id)
			}
			for {
				if _, err := st.Recv(); err != nil {
					return nil
				}
			}
		case "fail":
			return status.Error(codes.Code(a.Code), "scripted failure")
		case "close":
			return nil
		case "wrong":
			// An answer for an event that is not waiting for one.
			wrong := pm.EventResponseHeaders
			if ev.Event == pm.EventResponseHeaders {
				wrong = pm.EventRequestHeaders
			}
			resp = pfHeadersAnswer(wrong, nil)
		case "immediate":
			ir := &procpb.ImmediateResponse{
				Status:     &typepb.HttpStatus{Code: typepb.StatusCode_OK},
				GrpcStatus: &procpb.GrpcStatus{Status: uint32(a.Code)},
				Details:    pm.ImmediateDetails,
			}
			if len(a.Set) > 0 {
				ir.Headers = &procpb.HeaderMutation{SetHeaders: pfOptions(a.Set)}
			}
			resp = &procpb.ProcessingResponse{Response: &procpb.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
		default:
			var m *procpb.HeaderMutation
			if len(a.Set)+len(a.Remove) > 0 {
				m = &procpb.HeaderMutation{SetHeaders: pfOptions(a.Set), RemoveHeaders: a.Remove}
			}
			resp = pfHeadersAnswer(ev.Event, m)
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// pfHeadersAnswer is the CONTINUE answer to event with the mutation m.
func pfHeadersAnswer(event string, m *procpb.HeaderMutation) *procpb.ProcessingResponse {
	hr := &procpb.HeadersResponse{}
	if m != nil {
		hr.Response = &procpb.CommonResponse{HeaderMutation: m}
	}
	switch event {
	case pm.EventRequestHeaders:
		return &procpb.ProcessingResponse{Response: &procpb.ProcessingResponse_RequestHeaders{RequestHeaders: hr}}
	case pm.EventResponseHeaders:
		return &procpb.ProcessingResponse{Response: &procpb.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}}
	}
	return &procpb.ProcessingResponse{Response: &procpb.ProcessingResponse_ResponseTrailers{ResponseTrailers: &procpb.TrailersResponse{HeaderMutation: m}}}
}

// --- the fixture ---

// pfSideLimit is the side services' receive limit: oversized requests are
// cheap to make (headers of several MiB take seconds to encode under the
// race detector).
const pfSideLimit = pm.MaxSideMessage

// pfFixture is everything a case runs against, started once.
type pfFixture struct {
	ms        *e2e.ManagementServer
	srv       *xds.GRPCServer
	addr      net.Addr
	rec       *pfRecorder
	authzAddr string
	rlsAddr   string
	procAddr  string
	env       pm.Env
	gen       atomic.Int64 // the last configuration pushed
	ids       atomic.Int64 // RPC IDs given so far
	modes     chan connectivity.ServingMode
}

func startPFFixture(ctx context.Context, t testing.TB) *pfFixture {
	t.Helper()
	f := &pfFixture{rec: newPFRecorder(), modes: make(chan connectivity.ServingMode, 100)}
	side := func(register func(*grpc.Server), opts ...grpc.ServerOption) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(pfSideLimit))...)
		register(s)
		done := make(chan struct{})
		go func() { s.Serve(lis); close(done) }()
		t.Cleanup(func() { s.Stop(); <-done })
		return lis.Addr().String()
	}
	f.authzAddr = side(func(s *grpc.Server) { authpb.RegisterAuthorizationServer(s, pfAuthz{r: f.rec}) })
	f.rlsAddr = side(func(s *grpc.Server) { rlspb.RegisterRateLimitServiceServer(s, pfRLS{r: f.rec}) })
	f.procAddr = side(func(s *grpc.Server) { procpb.RegisterExternalProcessorServer(s, pfProc{r: f.rec}) }, grpc.StatsHandler(pfProcStats{f.rec}))

	f.ms = e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	allowed := `{"channel_creds": [{"type": "insecure"}]}`
	bootstrap := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{f.ms.Address}, NodeID: "node-pipeline-fuzz",
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		AllowedGRPCServices:                map[string]json.RawMessage{f.authzAddr: json.RawMessage(allowed), f.rlsAddr: json.RawMessage(allowed), f.procAddr: json.RawMessage(allowed)},
	})
	opts := append([]grpc.ServerOption{
		xds.BootstrapContents(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) { f.modes <- args.Mode }),
	}, f.rec.serverOptions()...)
	srv, err := xds.NewGRPCServer(opts...)
	if err != nil {
		t.Fatalf("xds.NewGRPCServer: %v", err)
	}
	testgrpc.RegisterTestServiceServer(srv, pfService{r: f.rec})
	f.srv = srv
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		// Bounded: a server a broken filter left stuck (a panic in the tap
		// can hang a connection) is reported, not waited for.
		stopped := make(chan struct{})
		go func() { srv.Stop(); close(stopped) }()
		timer := time.NewTimer(pfTimeout)
		defer timer.Stop()
		select {
		case <-stopped:
		case <-timer.C:
			t.Errorf("the server's Stop did not return within %v", pfTimeout)
			return
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	// The client's transport headers: what the handler sees of an RPC that
	// carries nothing but its ID.
	f.push(ctx, t, pm.Case{Chain: pm.Chain{Routes: []pm.Route{{Prefix: "/"}}}})
	select {
	case m := <-f.modes:
		if m != connectivity.ServingModeServing {
			t.Fatalf("serving mode %v, want Serving", m)
		}
	case <-ctx.Done():
		t.Fatal("the server never served")
	}
	cc := f.connect(ctx, t)
	defer cc.Close()
	id := f.newID()
	f.rec.mu.Lock()
	f.rec.script = map[string]*pm.RPC{id: {ID: id}}
	f.rec.mu.Unlock()
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(metadata.AppendToOutgoingContext(ctx, pm.IDHeader, id), &testpb.SimpleRequest{}, grpc.CallAuthority(pm.Domain)); err != nil {
		t.Fatalf("the client's first RPC: %v", err)
	}
	f.rec.mu.Lock()
	seen := f.rec.seen[id]
	f.rec.mu.Unlock()
	if seen == nil || !seen.handler {
		t.Fatal("the client's first RPC did not reach the handler")
	}
	var keys []string
	for k := range seen.handlerMD {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == ":authority" || k == pm.IDHeader {
			continue
		}
		for _, v := range seen.handlerMD[k] {
			f.env.Transport = append(f.env.Transport, pm.Header{Key: k, Value: v})
		}
	}
	return f
}

func (f *pfFixture) newID() string {
	return fmt.Sprintf("%0*d", pm.IDLen, f.ids.Add(1))
}

// connect returns a new client connection to the server (its own TCP
// connection once used).
func (f *pfFixture) connect(ctx context.Context, t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+f.addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	return cc
}

// push sends c's Listener as configuration number gen, whose probe virtual
// host answers only once the listener applied it, and returns gen.
func (f *pfFixture) push(ctx context.Context, t testing.TB, c pm.Case) int64 {
	t.Helper()
	gen := f.gen.Add(1)
	l, err := pfListener(f, c, gen)
	if err != nil {
		t.Fatalf("building the Listener of the case: %v\n%s", err, c.JSON())
	}
	if err := f.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{l}}); err != nil {
		t.Fatalf("ms.Update: %v", err)
	}
	return gen
}

// applied returns a new connection served by configuration gen: the
// management server's ACK comes before the listener applies a Listener,
// so this waits for it through the data plane, probing with :authority
// "gen-N" (a virtual host only that configuration has).
func (f *pfFixture) applied(ctx context.Context, t testing.TB, gen int64) (*grpc.ClientConn, error) {
	t.Helper()
	authority := fmt.Sprintf("gen-%d", gen)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cc := f.connect(ctx, t)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := testgrpc.NewTestServiceClient(cc).UnaryCall(pctx, &testpb.SimpleRequest{}, grpc.CallAuthority(authority))
		cancel()
		if err == nil {
			return cc, nil
		}
		cc.Close()
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("configuration %d never served (NACKed?): last probe: %v", gen, last)
		case <-tick.C:
		}
	}
}

// --- a case as xDS resources ---

func pfAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func pfName(name string, gen int64) string { return fmt.Sprintf("%s~%d", name, gen) }

func pfPercent(on bool) *corepb.RuntimeFractionalPercent {
	n := uint32(0)
	if on {
		n = 100
	}
	return &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: n}}
}

func pfHeaderMatcher(h pm.HeaderMatch) *routepb.HeaderMatcher {
	m := &routepb.HeaderMatcher{Name: h.Name}
	switch h.Kind {
	case "present":
		m.HeaderMatchSpecifier = &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}
	case "prefix":
		m.HeaderMatchSpecifier = &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: h.Value}}}
	default:
		m.HeaderMatchSpecifier = &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: h.Value}}}
	}
	return m
}

func pfPath(r pm.Rule) *matcherpb.PathMatcher {
	sm := &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: r.Path}}
	if r.PathPrefix != "" {
		sm.MatchPattern = &matcherpb.StringMatcher_Prefix{Prefix: r.PathPrefix}
	}
	return &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: sm}}
}

func pfRules(rs *pm.Rules) *rbacconfigpb.RBAC {
	if rs == nil {
		return nil
	}
	out := &rbacconfigpb.RBAC{Action: rbacconfigpb.RBAC_ALLOW, Policies: map[string]*rbacconfigpb.Policy{}}
	if rs.Deny {
		out.Action = rbacconfigpb.RBAC_DENY
	}
	for i, p := range rs.Policies {
		pol := &rbacconfigpb.Policy{}
		for _, r := range p.Permissions {
			perm := &rbacconfigpb.Permission{}
			switch {
			case r.Any:
				perm.Rule = &rbacconfigpb.Permission_Any{Any: true}
			case r.Header != nil:
				perm.Rule = &rbacconfigpb.Permission_Header{Header: pfHeaderMatcher(*r.Header)}
			default:
				perm.Rule = &rbacconfigpb.Permission_UrlPath{UrlPath: pfPath(r)}
			}
			pol.Permissions = append(pol.Permissions, perm)
		}
		for _, r := range p.Principals {
			pr := &rbacconfigpb.Principal{}
			switch {
			case r.Any:
				pr.Identifier = &rbacconfigpb.Principal_Any{Any: true}
			case r.Header != nil:
				pr.Identifier = &rbacconfigpb.Principal_Header{Header: pfHeaderMatcher(*r.Header)}
			case r.Authenticated:
				pr.Identifier = &rbacconfigpb.Principal_Authenticated_{Authenticated: &rbacconfigpb.Principal_Authenticated{}}
			default:
				pr.Identifier = &rbacconfigpb.Principal_UrlPath{UrlPath: pfPath(r)}
			}
			pol.Principals = append(pol.Principals, pr)
		}
		out.Policies[fmt.Sprintf("p%d", i)] = pol
	}
	return out
}

func pfRBAC(c *pm.RBAC) *rbacpb.RBAC {
	return &rbacpb.RBAC{Rules: pfRules(c.Rules), ShadowRules: pfRules(c.ShadowRules)}
}

func pfGRPCService(target, name string, short bool) *corepb.GrpcService {
	timeout := pm.LongTimeoutMillis
	if short {
		timeout = pm.ShortTimeoutMillis
	}
	return &corepb.GrpcService{
		TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target, StatPrefix: "fuzz"}},
		Timeout:         durationpb.New(time.Duration(timeout) * time.Millisecond),
		InitialMetadata: []*corepb.HeaderValue{{Key: "x-filter", Value: name}},
	}
}

func pfStringMatchers(ms []pm.StringMatch) *matcherpb.ListStringMatcher {
	if len(ms) == 0 {
		return nil
	}
	l := &matcherpb.ListStringMatcher{}
	for _, m := range ms {
		sm := &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: m.Exact}}
		if m.Prefix != "" {
			sm.MatchPattern = &matcherpb.StringMatcher_Prefix{Prefix: m.Prefix}
		}
		l.Patterns = append(l.Patterns, sm)
	}
	return l
}

func pfExtAuthz(f *pfFixture, c *pm.ExtAuthz, name string) *extauthzpb.ExtAuthz {
	m := &extauthzpb.ExtAuthz{
		Services:                  &extauthzpb.ExtAuthz_GrpcService{GrpcService: pfGRPCService(f.authzAddr, name, c.ShortTimeout)},
		FailureModeAllow:          c.FailureModeAllow,
		FailureModeAllowHeaderAdd: c.FailureModeAllowHeaderAdd,
		AllowedHeaders:            pfStringMatchers(c.Allowed),
		DisallowedHeaders:         pfStringMatchers(c.Disallowed),
	}
	if c.NotEnabled {
		m.FilterEnabled = pfPercent(false)
	}
	if c.DenyAtDisable {
		m.DenyAtDisable = &corepb.RuntimeFeatureFlag{DefaultValue: wrapperspb.Bool(true)}
	}
	if c.StatusOnError != 0 {
		m.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode(c.StatusOnError)}
	}
	m.DecoderHeaderMutationRules = pfMutationRules(c.Rules)
	return m
}

func pfLocalRL(c *pm.LocalRL) *localratelimitpb.LocalRateLimit {
	m := &localratelimitpb.LocalRateLimit{
		StatPrefix:                         c.StatPrefix,
		FilterEnabled:                      pfPercent(c.Enabled),
		FilterEnforced:                     pfPercent(c.Enforced),
		RateLimitedAsResourceExhausted:     c.AsResourceExhausted,
		ResponseHeadersToAdd:               pfOptions(c.ResponseHeaders),
		RequestHeadersToAddWhenNotEnforced: pfOptions(c.ShadowHeaders),
	}
	if !c.NoBucket {
		m.TokenBucket = &typepb.TokenBucket{MaxTokens: uint32(c.MaxTokens), FillInterval: durationpb.New(time.Hour)}
	}
	if c.Status != 0 {
		m.Status = &typepb.HttpStatus{Code: typepb.StatusCode(c.Status)}
	}
	return m
}

func pfFault(c *pm.Fault) *faultpb.HTTPFault {
	m := &faultpb.HTTPFault{}
	if c.Delay {
		m.Delay = &faultcommonpb.FaultDelay{
			FaultDelaySecifier: &faultcommonpb.FaultDelay_FixedDelay{FixedDelay: durationpb.New(time.Millisecond)},
			Percentage:         &typepb.FractionalPercent{Numerator: uint32(c.DelayPct)},
		}
	}
	if a := c.Abort; a != nil {
		fa := &faultpb.FaultAbort{Percentage: &typepb.FractionalPercent{Numerator: uint32(a.Pct)}}
		switch {
		case a.Header:
			fa.ErrorType = &faultpb.FaultAbort_HeaderAbort_{HeaderAbort: &faultpb.FaultAbort_HeaderAbort{}}
		case a.GRPC != nil:
			fa.ErrorType = &faultpb.FaultAbort_GrpcStatus{GrpcStatus: uint32(*a.GRPC)}
		default:
			fa.ErrorType = &faultpb.FaultAbort_HttpStatus{HttpStatus: uint32(a.HTTP)}
		}
		m.Abort = fa
		if a.Body != "" {
			m.Abort.ResponseBody = a.Body
		}
	}
	return m
}

func pfGlobalRL(f *pfFixture, c *pm.GlobalRL, name string) *rlpb.RateLimit {
	m := &rlpb.RateLimit{
		Domain:                         c.Domain,
		Timeout:                        durationpb.New(0), // the GrpcService's timeout alone
		FailureModeDeny:                c.FailureModeDeny,
		RateLimitedAsResourceExhausted: c.AsResourceExhausted,
		RateLimitService: &rlconfpb.RateLimitServiceConfig{
			TransportApiVersion: corepb.ApiVersion_V3,
			GrpcService:         pfGRPCService(f.rlsAddr, name, c.ShortTimeout),
		},
	}
	if c.NotEnabled {
		m.FilterEnabled = pfPercent(false)
	}
	if c.NotEnforced {
		m.FilterEnforced = pfPercent(false)
	}
	if c.StatusOnError != 0 {
		m.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode(c.StatusOnError)}
	}
	if c.LimitedStatus != 0 {
		m.RateLimitedStatus = &typepb.HttpStatus{Code: typepb.StatusCode(c.LimitedStatus)}
	}
	return m
}

func pfRateLimits(rls []pm.RateLimit) []*routepb.RateLimit {
	var out []*routepb.RateLimit
	for _, rl := range rls {
		r := &routepb.RateLimit{}
		for _, a := range rl.Actions {
			switch {
			case a.Header != "":
				r.Actions = append(r.Actions, &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RequestHeaders_{RequestHeaders: &routepb.RateLimit_Action_RequestHeaders{HeaderName: a.Header, DescriptorKey: a.Key}}})
			case a.Generic != "":
				r.Actions = append(r.Actions, &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_GenericKey_{GenericKey: &routepb.RateLimit_Action_GenericKey{DescriptorValue: a.Generic, DescriptorKey: a.Key}}})
			case a.Match != nil:
				hv := &routepb.RateLimit_Action_HeaderValueMatch{DescriptorValue: a.Match.Value}
				if a.Match.NotExpected {
					hv.ExpectMatch = wrapperspb.Bool(false)
				}
				for _, h := range a.Match.Headers {
					hv.Headers = append(hv.Headers, pfHeaderMatcher(h))
				}
				r.Actions = append(r.Actions, &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_HeaderValueMatch_{HeaderValueMatch: hv}})
			}
		}
		out = append(out, r)
	}
	return out
}

func pfScriptConfig(c *pm.Script) *xdstypepb.TypedStruct {
	url := pfScriptURL
	if c.Lazy {
		url = pfLazyURL
	}
	fields := map[string]any{"work": c.Work}
	for k, v := range map[string]string{"require": c.Require, "set": c.Set, "workset": c.WorkSet, "panic": c.Panic} {
		if v != "" {
			fields[k] = v
		}
	}
	if c.WorkRefuse != 0 {
		fields["workrefuse"] = float64(c.WorkRefuse)
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return &xdstypepb.TypedStruct{TypeUrl: url, Value: s}
}

func pfProcMode(m pm.ProcMode) *extprocpb.ProcessingMode {
	mode := func(s string) extprocpb.ProcessingMode_HeaderSendMode {
		switch s {
		case "SEND":
			return extprocpb.ProcessingMode_SEND
		case "SKIP":
			return extprocpb.ProcessingMode_SKIP
		}
		return extprocpb.ProcessingMode_DEFAULT
	}
	return &extprocpb.ProcessingMode{RequestHeaderMode: mode(m.RequestHeaders), ResponseHeaderMode: mode(m.ResponseHeaders), ResponseTrailerMode: mode(m.ResponseTrailers)}
}

func pfMutationRules(r *pm.MutationRules) *mutationpb.HeaderMutationRules {
	if r == nil {
		return nil
	}
	mr := &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(r.DisallowAll), DisallowIsError: wrapperspb.Bool(r.DisallowIsError)}
	if r.Allow != "" {
		mr.AllowExpression = &matcherpb.RegexMatcher{Regex: r.Allow}
	}
	if r.Disallow != "" {
		mr.DisallowExpression = &matcherpb.RegexMatcher{Regex: r.Disallow}
	}
	return mr
}

func pfExtProc(f *pfFixture, c *pm.ExtProc, name string) *extprocpb.ExternalProcessor {
	return &extprocpb.ExternalProcessor{
		GrpcService:              pfGRPCService(f.procAddr, name, false),
		ProcessingMode:           pfProcMode(c.Mode),
		FailureModeAllow:         c.FailureModeAllow,
		DisableImmediateResponse: c.DisableImmediateResponse,
		MutationRules:            pfMutationRules(c.Rules),
	}
}

func pfExtProcPerRoute(o *pm.ExtProcPerRoute) *extprocpb.ExtProcPerRoute {
	ov := &extprocpb.ExtProcOverrides{}
	if o.Mode != nil {
		ov.ProcessingMode = pfProcMode(*o.Mode)
	}
	if o.FailureModeAllow != nil {
		ov.FailureModeAllow = wrapperspb.Bool(*o.FailureModeAllow)
	}
	return &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: ov}}
}

var disabledFilter = pfAny(&routepb.FilterConfig{Disabled: true})

// pfListener is c's Listener for the fixture's server, as configuration
// gen: the case's filters (their names made unique to gen, so that token
// buckets start full), its bounds, and its routes in the virtual host
// "svc", with a virtual host "gen-<gen>" whose one route disables every
// filter: the probe that the configuration is applied.
func pfListener(f *pfFixture, c pm.Case, gen int64) (*listenerpb.Listener, error) {
	names := map[string]string{}
	hcm := &hcmpb.HttpConnectionManager{StatPrefix: "fuzz"}
	if c.Chain.MaxRequestHeadersKB != 0 {
		hcm.MaxRequestHeadersKb = wrapperspb.UInt32(uint32(c.Chain.MaxRequestHeadersKB))
	}
	if c.Chain.MaxHeadersCount != 0 {
		hcm.CommonHttpProtocolOptions = &corepb.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(uint32(c.Chain.MaxHeadersCount))}
	}
	probe := &routepb.Route{
		Match:                &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
		Action:               &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
		TypedPerFilterConfig: map[string]*anypb.Any{},
	}
	for _, fl := range c.Chain.Filters {
		name := pfName(fl.Name, gen)
		names[name] = fl.Name
		var cfg proto.Message
		switch {
		case fl.RBAC != nil:
			cfg = pfRBAC(fl.RBAC)
		case fl.ExtAuthz != nil:
			cfg = pfExtAuthz(f, fl.ExtAuthz, name)
		case fl.LocalRL != nil:
			cfg = pfLocalRL(fl.LocalRL)
		case fl.Fault != nil:
			cfg = pfFault(fl.Fault)
		case fl.RateLimit != nil:
			cfg = pfGlobalRL(f, fl.RateLimit, name)
		case fl.Script != nil:
			cfg = pfScriptConfig(fl.Script)
		case fl.ExtProc != nil:
			cfg = pfExtProc(f, fl.ExtProc, name)
		default:
			return nil, fmt.Errorf("filter %q has no config", fl.Name)
		}
		hcm.HttpFilters = append(hcm.HttpFilters, &hcmpb.HttpFilter{Name: name, Disabled: fl.Disabled, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: pfAny(cfg)}})
		probe.TypedPerFilterConfig[name] = disabledFilter
	}
	hcm.HttpFilters = append(hcm.HttpFilters, e2e.RouterHTTPFilter())
	vh := &routepb.VirtualHost{Name: "svc", Domains: []string{pm.Domain}, RateLimits: pfRateLimits(c.Chain.RateLimits)}
	for i, rt := range c.Chain.Routes {
		m := &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: rt.Prefix}}
		if rt.Path != "" {
			m.PathSpecifier = &routepb.RouteMatch_Path{Path: rt.Path}
		}
		for _, h := range rt.Headers {
			m.Headers = append(m.Headers, pfHeaderMatcher(h))
		}
		r := &routepb.Route{Name: fmt.Sprintf("r%d", i), Match: m, Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}}}
		if rt.Forward {
			r.Action = &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "cluster"}}}
		}
		for fname, o := range rt.Overrides {
			var cfg proto.Message
			switch {
			case o.Disabled:
				cfg = &routepb.FilterConfig{Disabled: true}
			case o.RBAC != nil:
				pr := &rbacpb.RBACPerRoute{}
				if o.RBAC.RBAC != nil {
					pr.Rbac = pfRBAC(o.RBAC.RBAC)
				}
				cfg = pr
			case o.ExtAuthz:
				cfg = &extauthzpb.ExtAuthzPerRoute{Override: &extauthzpb.ExtAuthzPerRoute_CheckSettings{CheckSettings: &extauthzpb.CheckSettings{}}}
			case o.LocalRL != nil:
				cfg = pfLocalRL(o.LocalRL)
			case o.Fault != nil:
				cfg = pfFault(o.Fault)
			case o.RateLimit != nil:
				cfg = &rlpb.RateLimitPerRoute{Domain: o.RateLimit.Domain, RateLimits: pfRateLimits(o.RateLimit.RateLimits)}
			case o.Script != nil:
				cfg = pfScriptConfig(o.Script)
			case o.ExtProc != nil:
				cfg = pfExtProcPerRoute(o.ExtProc)
			default:
				return nil, fmt.Errorf("route %d: override of %q is empty", i, fname)
			}
			if r.TypedPerFilterConfig == nil {
				r.TypedPerFilterConfig = map[string]*anypb.Any{}
			}
			r.TypedPerFilterConfig[pfName(fname, gen)] = pfAny(cfg)
		}
		vh.Routes = append(vh.Routes, r)
	}
	hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
		Name: "fuzz",
		VirtualHosts: []*routepb.VirtualHost{
			{Name: "probe", Domains: []string{fmt.Sprintf("gen-%d", gen)}, Routes: []*routepb.Route{probe}},
			vh,
		},
	}}
	f.rec.mu.Lock()
	f.rec.names = names
	f.rec.mu.Unlock()
	host, port := hostPort(f.addr)
	return &listenerpb.Listener{
		Name: e2e.ServerListenerName(host, port),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Protocol: corepb.SocketAddress_TCP, Address: host, PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains: []*listenerpb.FilterChain{{
			Name: "fuzz",
			Filters: []*listenerpb.Filter{{
				Name:       e2e.HCMFilterName,
				ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)},
			}},
		}},
	}, nil
}
