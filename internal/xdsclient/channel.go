package xdsclient

import (
	"context"
	"sort"
	"sync"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
)

// xdsChannel is the connection to one management server and its ADS stream,
// shared by every authority that uses the server (gRFC A47).
//
// Its goroutine (run) owns the gRPC stream: it opens streams, reconnects with
// backoff, reads responses and hands them to the serializer, one at a time
// (flow control). While the serializer has queued requests for the live
// stream, a sender goroutine writes them; it exits when the queue is empty,
// so an idle client has none. All protocol state (versions, nonces,
// subscriptions) is decided on the serializer.
type xdsChannel struct {
	c      *Client                 // immutable
	server *bootstrap.ServerConfig // immutable
	key    string                  // immutable; key in Client.channels
	ctx    context.Context         // immutable; cancelled by close
	cancel context.CancelFunc      // immutable

	// cc is the connection, made by run once the credentials are built:
	// only run and runStream, on the channel's goroutine, touch it.
	cc *grpc.ClientConn

	mu      sync.Mutex
	live    *liveStream   // guarded by mu; the stream requests are written to, nil if none
	queue   []*outRequest // guarded by mu; requests for stream live
	sending bool          // guarded by mu; a sender goroutine runs for live

	// Only touched on the serializer:
	users     map[*authority]struct{} // authorities whose chans include this channel
	streamGen uint64                  // the stream the serializer knows to be up; 0 if none
	failing   bool                    // the last stream ended before any response
	connected bool                    // gRFC A78 grpc.xds_client.connected
	lastErr   error                   // how the last stream ended; nil if none has
	lastErrAt time.Time               // when
	closed    bool
	types     map[string]*typeState // by type URL
}

// typeState is the ADS state of one type on one channel. Only touched on
// the serializer.
type typeState struct {
	version string // version_info of the last ACKed response
	nonce   string // nonce of the last response on the current stream
}

// outRequest is a request queued for the sender of stream gen.
type outRequest struct {
	gen uint64
	req *discoverypb.DiscoveryRequest
}

// liveStream is an open ADS stream, as its senders need it.
type liveStream struct {
	gen    uint64                                                                 // immutable
	stream discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient // immutable
	cancel context.CancelFunc                                                     // immutable; ends the stream
	// sentFirst is set once a request was written: the first carries the
	// node (gRFC A27). Guarded by xdsChannel.mu.
	sentFirst bool
	// senders counts the sender goroutines of the stream; runStream waits
	// for them before it returns.
	senders sync.WaitGroup
}

// serverKey identifies a management server connection (gRFC A47: same URI,
// credentials and features share one channel).
func serverKey(s *bootstrap.ServerConfig) string { return s.Key() }

// acquireChannel returns the channel to server, creating it (and starting
// its goroutine) on first use. The credentials are built, and the
// connection made, by that goroutine: credentials may be slow to build
// (google_default asks a metadata server; a registered type may do
// anything), and the serializer runs every watch of the client. Only
// called from serializer callbacks.
func (c *Client) acquireChannel(server *bootstrap.ServerConfig) *xdsChannel {
	key := serverKey(server)
	if ch, ok := c.channels[key]; ok {
		return ch
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := &xdsChannel{
		c:      c,
		server: server,
		key:    key,
		ctx:    ctx,
		cancel: cancel,
		users:  make(map[*authority]struct{}),
		types:  make(map[string]*typeState),
	}
	c.channels[key] = ch
	c.chanWG.Add(1)
	go ch.run()
	return ch
}

// close stops the channel's goroutines; run closes the connection on its
// way out. Only called from serializer callbacks.
func (ch *xdsChannel) close() {
	ch.closed = true
	ch.streamGen = 0
	ch.cancel()
}

func (ch *xdsChannel) typeState(typeURL string) *typeState {
	ts := ch.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		ch.types[typeURL] = ts
	}
	return ts
}

// watched returns the state of the resource of typeURL with the canonical
// name if a user of ch watches it, else nil. Only called from serializer
// callbacks.
func (ch *xdsChannel) watched(typeURL, name string) *resourceState {
	for a := range ch.users {
		if s, ok := a.resources[typeURL][name]; ok {
			return s
		}
	}
	return nil
}

// subscribedNames returns the names of typeURL that the users of ch watch,
// sorted. Only called from serializer callbacks.
func (ch *xdsChannel) subscribedNames(typeURL string) []string {
	var names []string
	for a := range ch.users {
		for name := range a.resources[typeURL] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// sendSubscription queues a request with the current subscriptions of
// typeURL on the live stream of ch, if there is one (otherwise the next
// stream sends them). Only called from serializer callbacks.
func (c *Client) sendSubscription(ch *xdsChannel, typeURL string) {
	if ch.closed || ch.streamGen == 0 {
		return
	}
	ts := ch.typeState(typeURL)
	ch.enqueue(typeURL, ts.version, ts.nonce, ch.subscribedNames(typeURL), nil)
}

// enqueue queues one request for the current stream, starting a sender if
// none runs.
// Only called from serializer callbacks.
func (ch *xdsChannel) enqueue(typeURL, version, nonce string, names []string, errDetail *statuspb.Status) {
	req := &discoverypb.DiscoveryRequest{
		TypeUrl:       typeURL,
		VersionInfo:   version,
		ResponseNonce: nonce,
		ResourceNames: names,
		ErrorDetail:   errDetail,
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	live := ch.live
	if live == nil || live.gen != ch.streamGen {
		return // that stream is gone; the next one re-sends everything
	}
	ch.queue = append(ch.queue, &outRequest{gen: ch.streamGen, req: req})
	if !ch.sending {
		ch.sending = true
		live.senders.Add(1)
		go ch.send(live)
	}
}

// handleStreamUp re-sends every subscription on a new stream, with the last
// accepted version of each type and no nonce (gRFC A27). Only called from
// serializer callbacks.
func (c *Client) handleStreamUp(ch *xdsChannel, gen uint64) {
	if ch.closed || c.closed.HasFired() {
		return
	}
	ch.streamGen = gen
	if !ch.failing {
		ch.connected = true
	}
	typeURLs := make(map[string]bool)
	for a := range ch.users {
		for typeURL := range a.resources {
			typeURLs[typeURL] = true
		}
	}
	for _, ts := range ch.types {
		ts.nonce = ""
	}
	urls := make([]string, 0, len(typeURLs))
	for u := range typeURLs {
		urls = append(urls, u)
	}
	sort.Strings(urls)
	for _, u := range urls {
		c.sendSubscription(ch, u)
	}
}

// handleStreamDown notes the end of a stream (or a failed attempt to open
// one). Only called from serializer callbacks.
func (c *Client) handleStreamDown(ch *xdsChannel, err error, gotResponse bool) {
	if ch.closed || c.closed.HasFired() {
		return
	}
	ch.streamGen = 0
	ch.lastErr, ch.lastErrAt = err, c.opts.Clock.Now()
	c.stopTimersOf(ch)
	if gotResponse {
		logger.Infof("xdsclient: ADS stream to %q ended after receiving responses, reconnecting: %v [xds node id %q]", ch.server, err, c.nodeID)
		return
	}
	logger.Warningf("xdsclient: ADS stream to %q failed: %v [xds node id %q]", ch.server, err, c.nodeID)
	if !ch.failing {
		c.metrics.serverFailure(ch.server.ServerURI)
	}
	ch.failing, ch.connected = true, false
	users := make([]*authority, 0, len(ch.users))
	for a := range ch.users {
		users = append(users, a)
	}
	for _, a := range users {
		c.handleConnectivityFailure(a, ch, err)
	}
}

// run is the channel's goroutine: it builds the credentials and the
// connection (a failure is reported as the first stream's), then opens ADS
// streams until the channel is closed, waiting between attempts (gRFC A57:
// backoff, reset by a stream that received a response). A build in
// progress is not interrupted: closing the client waits for it.
func (ch *xdsChannel) run() {
	defer ch.c.chanWG.Done()
	cc, cleanup, err := ch.dial()
	if err != nil {
		ch.c.serializer.TrySchedule(func(context.Context) { ch.c.handleStreamDown(ch, err, false) })
		<-ch.ctx.Done()
		return
	}
	ch.cc = cc
	defer func() {
		cc.Close()
		cleanup()
	}()
	var gen uint64
	retries := 0
	for ch.ctx.Err() == nil {
		gen++
		gotResponse, err := ch.runStream(gen)
		if ch.ctx.Err() != nil {
			return
		}
		ch.c.serializer.TrySchedule(func(context.Context) { ch.c.handleStreamDown(ch, err, gotResponse) })
		if gotResponse {
			retries = 0
			continue
		}
		t := ch.c.opts.Clock.NewTimer(ch.c.opts.Backoff(retries))
		retries++
		select {
		case <-t.C():
		case <-ch.ctx.Done():
			t.Stop()
			return
		}
	}
}

// dial builds the channel's credentials and its connection (which does not
// connect: the first stream does). cleanup releases what the credentials
// hold, after the connection is closed. On error there is nothing to
// release.
func (ch *xdsChannel) dial() (cc *grpc.ClientConn, cleanup func(), err error) {
	opts, cleanup, err := credentialOptions(ch.server)
	if err != nil {
		return nil, nil, err
	}
	// gRPC's default 4 MB receive limit is far below what a control plane
	// may send (a Listener with thousands of filter chains): over it the
	// stream breaks and reconnects forever without the resource ever being
	// seen or NACKed. Envoy has no such limit either.
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseSize)))
	cc, err = grpc.NewClient(ch.server.ServerURI, opts...)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return cc, cleanup, nil
}

// runStream runs one ADS stream until it fails. gotResponse says whether it
// received any response.
func (ch *xdsChannel) runStream(gen uint64) (gotResponse bool, err error) {
	ctx, cancel := context.WithCancel(ch.ctx)
	defer cancel()
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(ch.cc).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	live := &liveStream{gen: gen, stream: stream, cancel: cancel}
	ch.mu.Lock()
	ch.live, ch.queue = live, nil
	ch.mu.Unlock()
	ch.c.serializer.TrySchedule(func(context.Context) { ch.c.handleStreamUp(ch, gen) })
	defer func() {
		cancel()
		ch.mu.Lock()
		ch.live, ch.queue = nil, nil
		ch.mu.Unlock()
		// A sender still writing sees the stream cancelled and returns.
		live.senders.Wait()
	}()

	for {
		resp, err := stream.Recv()
		if err != nil {
			return gotResponse, err
		}
		gotResponse = true
		done := make(chan struct{})
		release := func() { close(done) }
		// This goroutine waits for the response to be handled anyway: it
		// handles it itself when the serializer is idle.
		if !ch.c.serializer.RunOrSchedule(func(context.Context) { ch.c.handleResponse(ch, gen, resp, release) }) {
			return gotResponse, errClientClosed
		}
		select {
		case <-done:
		case <-ctx.Done():
			return gotResponse, ctx.Err()
		}
	}
}

// send writes the requests queued for live until none is left, then
// returns; enqueue starts it again for the next one. A failed write ends the
// stream (Recv then reports why). The first request of a stream carries the
// node (gRFC A27).
func (ch *xdsChannel) send(live *liveStream) {
	defer live.senders.Done()
	for {
		r, first := ch.pop(live)
		if r == nil {
			return
		}
		if first {
			r.req.Node = ch.c.cfg.Node
		}
		if err := live.stream.Send(r.req); err != nil {
			ch.mu.Lock()
			ch.sending = false
			ch.mu.Unlock()
			live.cancel()
			return
		}
		typeURL, names, gen := r.req.GetTypeUrl(), r.req.GetResourceNames(), live.gen
		ch.c.serializer.TrySchedule(func(context.Context) { ch.c.startTimers(ch, gen, typeURL, names) })
	}
}

// pop takes the oldest request queued for live, and reports whether it is
// the stream's first; when there is none it marks the sender gone and
// returns nil.
func (ch *xdsChannel) pop(live *liveStream) (r *outRequest, first bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for len(ch.queue) > 0 && ch.live == live {
		r := ch.queue[0]
		ch.queue[0] = nil
		ch.queue = ch.queue[1:]
		if r.gen == live.gen {
			first = !live.sentFirst
			live.sentFirst = true
			return r, first
		}
	}
	ch.sending = false
	return nil, false
}

// maxResponseSize bounds one ADS response: large enough for any real
// configuration, small enough that a runaway control plane cannot make the
// client allocate without limit.
const maxResponseSize = 256 << 20
