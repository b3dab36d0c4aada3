package httpfilter

import "context"

// Events is a set of the events of an RPC after its request headers: the
// client's messages and half-close, the server's headers, messages and
// trailers. A filter that acts on some of them declares them in Needs, and
// its steps return, as their work, a Call that handles them for one RPC.
type Events uint8

// The events a Call may handle, each with the interface its Call
// implements for it.
const (
	// ClientMessages: each message the client sends, and its half-close,
	// before the handler receives them (MessageReceiver).
	ClientMessages Events = 1 << iota
	// ServerHeaders: the response headers, before they are sent
	// (HeaderSender).
	ServerHeaders
	// ServerMessages: each message the handler sends, before it is sent
	// (MessageSender).
	ServerMessages
	// ServerTrailers: the RPC's status and trailers, before they are sent
	// (TrailerSender).
	ServerTrailers
)

// Call is a filter's state for one RPC, for the events of the RPC after its
// request headers (Events), as gRPC's C-core has a filter's per-call state.
// A step creates it per RPC and returns it as its work (After): RunAfter
// handles the request headers, as any work does, and once every filter let
// the RPC through, the server hands the call the events it names.
//
// Client-to-server events (ClientMessages) go through the calls in
// http_filters order, the handler last; server-to-client events in the
// reverse order, from the handler to the client, as Envoy's encoder path
// runs its filters. Each filter sees an event as the filters before it on
// that path left it, and the events of one direction in order: a call's
// headers before its messages, its messages before its trailers. The two
// directions are independent, and their methods may run at the same time
// on different goroutines (a handler may receive and send at once); the
// methods of one direction never run concurrently with each other. Every
// method runs on a goroutine of the RPC, never gRPC's reader, and may block,
// returning when ctx is done.
//
// An error from any method ends the RPC with that error's status (a gRPC
// status error keeps its code, others are UNKNOWN), whatever the handler
// does: its context is cancelled, its later receives and sends fail, and
// the client gets that status. A filter ends an RPC on purpose this way
// (ext_proc's immediate_response). A panic fails the RPC with INTERNAL,
// logged with the filter's name, as in Step.Run.
//
// Messages are the RPC's messages as protocol buffers encode them, the
// bytes gRPC carries in each length-prefixed message: the server encodes
// and decodes them with the RPC's message types, so a call may return
// messages it built itself. A message the RPC's types cannot decode fails
// the RPC with INTERNAL, as gRPC fails a message it cannot decode. An RPC
// whose messages are not protocol buffers fails with INTERNAL on a route
// where a call handles messages.
type Call interface {
	After
	// Events returns the events of this RPC the call handles: a subset of
	// its filter's Needs.Events. It is read once, after RunAfter let the
	// RPC through; the call must implement the interface of each event it
	// returns.
	Events() Events
	// End is called once for every call whose RunAfter ran, when the RPC
	// ends (after the handler and every other method of the call
	// returned), or when RunAfter or a filter after it refused the RPC,
	// with the status error the client gets (nil: OK). It releases what
	// the call holds, and must not block for long.
	End(err error)
}

// MessageReceiver is a Call that handles the client's messages
// (ClientMessages).
type MessageReceiver interface {
	Call
	// RecvMessage returns the next message the handler (or the next
	// filter) receives. next returns the next message as the filters
	// before this one left it: like io.Reader, a message may come with
	// io.EOF, when the client half-closed after it, and io.EOF alone is the
	// half-close. RecvMessage returns the same way, and may return
	// messages unrelated to the ones it read: none, one or several for
	// each. After it returned io.EOF it is not called again.
	RecvMessage(ctx context.Context, next func() ([]byte, error)) ([]byte, error)
}

// HeaderSender is a Call that handles the response headers (ServerHeaders).
type HeaderSender interface {
	Call
	// SendHeader may change header, the response headers, before they are
	// sent. endOfStream reports that the RPC ends without a response
	// message or headers of its own (gRPC's Trailers-Only response): the
	// handler returned having sent neither.
	SendHeader(ctx context.Context, header map[string][]string, endOfStream bool) error
}

// MessageSender is a Call that handles the handler's messages
// (ServerMessages).
type MessageSender interface {
	Call
	// SendMessage is given each message the handler sends, as the filters
	// after this one in http_filters order left it, and sends the messages
	// the client gets instead through send: none, one or several, now or
	// from a later SendMessage or SendTrailer of the same call. send
	// returns the error that ended the RPC, if one did.
	SendMessage(ctx context.Context, msg []byte, send func([]byte) error) error
}

// TrailerSender is a Call that handles the RPC's status and trailers
// (ServerTrailers).
type TrailerSender interface {
	Call
	// SendTrailer is given the RPC's status as the handler and the filters
	// after this one left it (rpcErr, a gRPC status error; nil for OK) and
	// may change trailer, the trailers. It may send the messages it still
	// owes the client through send first (as MessageSender), unless the
	// RPC already failed. It returns the status the client gets: rpcErr to
	// leave it.
	SendTrailer(ctx context.Context, rpcErr error, trailer map[string][]string, send func([]byte) error) error
}
