// Package extprocserver is a scriptable envoy.service.ext_proc.v3
// ExternalProcessor server for tests: a real gRPC server on loopback that
// answers each ProcessingRequest as a Handler says, and records every stream
// it served (its incoming metadata, the requests received, the responses
// sent and how it ended). Only tests import it.
//
// Each stream is served by two goroutines: one receives and records the
// requests as they arrive, the other hands them, in order, to the Handler and
// sends what it returns. A Handler that blocks (Hang) therefore does not stop
// the recording: a test can still wait for the requests sent after the one
// that is not answered.
//
// A stream ends when the Handler returns an error (the stream's status, or OK
// for ErrCloseOK), when its context ends (the client cancelled it, or the
// server was stopped), or when the client has half-closed it and every
// request received has been handled: the server then ends it with OK.
package extprocserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	extprocpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Server is a running ext_proc server. Its methods are safe for concurrent
// use.
type Server struct {
	addr      string        // immutable
	gs        *grpc.Server  // immutable
	serveDone chan struct{} // closed when Serve has returned
	stopOnce  sync.Once
	wg        sync.WaitGroup // the goroutines of every stream
	conns     atomic.Int64   // connections accepted

	mu      sync.Mutex
	handler Handler        // guarded by mu; taken by each new stream
	stopped bool           // guarded by mu; new streams are refused
	streams []*streamState // guarded by mu; in the order they started
	changed chan struct{}  // guarded by mu; closed and replaced on every change
}

// streamState is the record of one stream and the queue of its requests not
// yet handled (the requests from handled on).
type streamState struct {
	md   metadata.MD   // immutable
	wake chan struct{} // capacity 1; signalled when a request or the end of receiving is recorded

	// All guarded by Server.mu.
	reqs       []*extprocpb.ProcessingRequest
	handled    int
	resps      []*extprocpb.ProcessingResponse
	recvErr    error // io.EOF after a half-close; set once receiving has stopped
	halfClosed bool
	ended      bool
	st         *status.Status
}

// StreamRecord is what the server saw of one stream: a copy, which later
// events do not change (the messages it points to are shared: do not
// modify them).
type StreamRecord struct {
	// Metadata is the stream's incoming metadata (headers), such as the
	// ext_proc filter's grpc_initial_metadata.
	Metadata metadata.MD
	// Requests are the requests received, in order. A request that arrives
	// after the server has ended the stream is not recorded.
	Requests []*extprocpb.ProcessingRequest
	// Responses are the responses sent, in order.
	Responses []*extprocpb.ProcessingResponse
	// HalfClosed reports whether the client half-closed the stream.
	HalfClosed bool
	// Ended reports whether the stream has ended; Status is then how (OK,
	// the Handler's error, or Canceled/DeadlineExceeded when the stream's
	// context ended first).
	Ended  bool
	Status *status.Status
}

// Events returns the events of r's requests, in order.
func (r StreamRecord) Events() []Event {
	out := make([]Event, len(r.Requests))
	for i, req := range r.Requests {
		out[i] = EventOf(req)
	}
	return out
}

// Start starts an ext_proc server on a new port of 127.0.0.1 that answers
// with h (nil: PassThrough), with the given gRPC server options, and stops it
// when the test ends.
func Start(t testing.TB, h Handler, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = PassThrough()
	}
	s := &Server{
		addr:      lis.Addr().String(),
		serveDone: make(chan struct{}),
		handler:   h,
		changed:   make(chan struct{}),
	}
	s.gs = grpc.NewServer(append(opts, grpc.StatsHandler(connCounter{&s.conns}))...)
	extprocpb.RegisterExternalProcessorServer(s.gs, service{s: s})
	go func() {
		defer close(s.serveDone)
		s.gs.Serve(lis)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Addr returns the address the server listens on (host:port).
func (s *Server) Addr() string { return s.addr }

// Stop closes the server's listener and connections, which ends every
// stream, and returns when every goroutine of the server has ended; it
// waits for Handlers to return, so a Handler must return when its stream's
// context ends. Later calls do nothing. Start makes it run when the test
// ends; a test calls it to make the server unreachable before then.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.gs.Stop()
		<-s.serveDone
		s.wg.Wait()
	})
}

// SetHandler makes h (nil: PassThrough) the Handler of the streams started
// from now on; streams already started keep theirs.
func (s *Server) SetHandler(h Handler) {
	if h == nil {
		h = PassThrough()
	}
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// Conns returns how many connections the server has accepted.
func (s *Server) Conns() int { return int(s.conns.Load()) }

// Streams returns the record of every stream started, in the order they
// started.
func (s *Server) Streams() []StreamRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

// Requests returns the requests received on each stream, in the order the
// streams started.
func (s *Server) Requests() [][]*extprocpb.ProcessingRequest {
	recs := s.Streams()
	out := make([][]*extprocpb.ProcessingRequest, len(recs))
	for i, r := range recs {
		out[i] = r.Requests
	}
	return out
}

// Wait returns nil as soon as cond, called with the records Streams would
// return, reports true, and ctx's error, saying what was seen, if ctx ends
// first. cond is called with the server's lock held: it must not call the
// server's methods.
func (s *Server) Wait(ctx context.Context, cond func([]StreamRecord) bool) error {
	for {
		s.mu.Lock()
		recs := s.snapshotLocked()
		ok := cond(recs)
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("extprocserver: %w while waiting; streams seen: %s", ctx.Err(), summary(recs))
		}
	}
}

// WaitStreams waits until at least n streams have started.
func (s *Server) WaitStreams(ctx context.Context, n int) error {
	return s.Wait(ctx, func(recs []StreamRecord) bool { return len(recs) >= n })
}

// WaitEnded waits until at least n streams have started and the first n of
// them have ended, and returns their records.
func (s *Server) WaitEnded(ctx context.Context, n int) ([]StreamRecord, error) {
	var out []StreamRecord
	err := s.Wait(ctx, func(recs []StreamRecord) bool {
		if len(recs) < n {
			return false
		}
		for _, r := range recs[:n] {
			if !r.Ended {
				return false
			}
		}
		out = recs[:n]
		return true
	})
	return out, err
}

// WaitRequests waits until stream i (0 for the first stream started) has
// started and at least n requests have been received on it, and returns its
// record.
func (s *Server) WaitRequests(ctx context.Context, i, n int) (StreamRecord, error) {
	var out StreamRecord
	err := s.Wait(ctx, func(recs []StreamRecord) bool {
		if len(recs) <= i || len(recs[i].Requests) < n {
			return false
		}
		out = recs[i]
		return true
	})
	return out, err
}

// summary describes recs in a line, for a timeout's error.
func summary(recs []StreamRecord) string {
	if len(recs) == 0 {
		return "none"
	}
	out := ""
	for i, r := range recs {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("#%d %v", i, r.Events())
		if r.HalfClosed {
			out += " half-closed"
		}
		if r.Ended {
			out += " ended with " + r.Status.Code().String()
		}
	}
	return out
}

// snapshotLocked copies the records of every stream. s.mu is held.
func (s *Server) snapshotLocked() []StreamRecord {
	out := make([]StreamRecord, len(s.streams))
	for i, st := range s.streams {
		out[i] = StreamRecord{
			Metadata:   st.md,
			Requests:   append([]*extprocpb.ProcessingRequest(nil), st.reqs...),
			Responses:  append([]*extprocpb.ProcessingResponse(nil), st.resps...),
			HalfClosed: st.halfClosed,
			Ended:      st.ended,
			Status:     st.st,
		}
	}
	return out
}

// changedLocked wakes every Wait. s.mu is held.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// service is the ExternalProcessor service of a Server.
type service struct {
	extprocpb.UnimplementedExternalProcessorServer
	s *Server
}

func (v service) Process(stream extprocpb.ExternalProcessor_ProcessServer) error {
	return v.s.process(stream)
}

// process serves one ext_proc stream.
func (s *Server) process(stream extprocpb.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	st := &streamState{md: md.Copy(), wake: make(chan struct{}, 1)}

	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "extprocserver: stopped")
	}
	// Added under mu before stopped is set: Stop's Wait comes after.
	s.wg.Add(2)
	defer s.wg.Done()
	h := s.handler
	index := len(s.streams)
	s.streams = append(s.streams, st)
	s.changedLocked()
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		s.receive(stream, st)
	}()

	err := s.serve(ctx, stream, st, h, index)
	if errors.Is(err, ErrCloseOK) {
		err = nil
	}
	sts := status.Convert(err)
	if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
		// The stream's context ended (the handler may have returned
		// whatever error it liked): that is how the stream ended.
		sts = status.FromContextError(ctxErr)
	}
	s.mu.Lock()
	st.ended = true
	st.st = sts
	s.changedLocked()
	s.mu.Unlock()
	return sts.Err()
}

// receive records the requests of stream until receiving fails.
func (s *Server) receive(stream extprocpb.ExternalProcessor_ProcessServer, st *streamState) {
	for {
		req, err := stream.Recv()
		s.mu.Lock()
		if st.ended {
			s.mu.Unlock()
			return
		}
		if err != nil {
			st.recvErr = err
			st.halfClosed = err == io.EOF
		} else {
			st.reqs = append(st.reqs, req)
		}
		s.changedLocked()
		s.mu.Unlock()
		select {
		case st.wake <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// serve hands st's requests to h in order and sends h's responses, until h
// returns an error, sending fails, or there is no request left to handle
// after receiving has stopped.
func (s *Server) serve(ctx context.Context, stream extprocpb.ExternalProcessor_ProcessServer, st *streamState, h Handler, index int) error {
	hs := &Stream{Index: index, Metadata: st.md, ctx: ctx}
	for n := 0; ; n++ {
		req, err := s.next(ctx, st)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		hs.N = n
		resps, herr := h(hs, req)
		for _, r := range resps {
			if r == nil {
				continue
			}
			if err := stream.Send(r); err != nil {
				return err
			}
			s.mu.Lock()
			st.resps = append(st.resps, r)
			s.changedLocked()
			s.mu.Unlock()
		}
		if herr != nil {
			return herr
		}
	}
}

// next returns st's next request not yet handled, waiting for it; io.EOF
// when the client half-closed the stream and every request was handled, or
// the error that stopped receiving.
func (s *Server) next(ctx context.Context, st *streamState) (*extprocpb.ProcessingRequest, error) {
	for {
		s.mu.Lock()
		if st.handled < len(st.reqs) {
			req := st.reqs[st.handled]
			st.handled++
			s.mu.Unlock()
			return req, nil
		}
		err := st.recvErr
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-st.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connCounter is a stats.Handler that counts the connections accepted.
type connCounter struct{ n *atomic.Int64 }

func (c connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c connCounter) HandleConn(_ context.Context, cs stats.ConnStats) {
	if _, ok := cs.(*stats.ConnBegin); ok {
		c.n.Add(1)
	}
}
