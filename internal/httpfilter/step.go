package httpfilter

import "github.com/proxyless-grpc/xds/httpfilter"

// The vocabulary of a filter's per-RPC work is the public package
// httpfilter's, documented there: the framework runs built-in filters and
// users' ones with the same types, and a request view that package rbac
// evaluates as it is (rbac.RequestInfo is httpfilter.Request).
type (
	// Headers is the request metadata a step reads.
	Headers = httpfilter.Headers
	// Request is the request view shared by filters and RBAC.
	Request = httpfilter.Request
	// RPC is what a step sees of an RPC.
	RPC = httpfilter.RPC
	// Step is the per-RPC work of one filter instance on one route.
	Step = httpfilter.Step
	// After is work a step returns that decides later, where it may block.
	After = httpfilter.After
	// ConnState is the state the steps of one connection share.
	ConnState = httpfilter.ConnState
	// Needs is what a filter's steps need besides the tap handle.
	Needs = httpfilter.Needs
	// Events is a set of the events after the request headers.
	Events = httpfilter.Events
	// Call is a filter's state for one RPC, for its events.
	Call = httpfilter.Call
	// MessageReceiver, HeaderSender, MessageSender and TrailerSender are
	// the Calls that handle each event.
	MessageReceiver = httpfilter.MessageReceiver
	HeaderSender    = httpfilter.HeaderSender
	MessageSender   = httpfilter.MessageSender
	TrailerSender   = httpfilter.TrailerSender
	// Config is a parsed and validated filter config, top-level or
	// override. It is immutable; its concrete type is the filter's own.
	Config = httpfilter.Config
)

// The events a Call handles (httpfilter's).
const (
	ClientMessages = httpfilter.ClientMessages
	ServerHeaders  = httpfilter.ServerHeaders
	ServerMessages = httpfilter.ServerMessages
	ServerTrailers = httpfilter.ServerTrailers
)

// ErrSkipHandler is httpfilter.ErrSkipHandler.
var ErrSkipHandler = httpfilter.ErrSkipHandler
