package xdsclient

import (
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"google.golang.org/protobuf/types/known/anypb"
)

// ResourceType describes one xDS resource type to the client: how it is named
// on the wire and how one resource of it is decoded. A ResourceType is
// immutable once passed to the client; the client identifies types by
// TypeURL, so two different *ResourceType values with the same TypeURL must
// not be used with one client.
type ResourceType struct {
	// TypeURL is the type URL of the resource on the wire, for example
	// "type.googleapis.com/envoy.config.listener.v3.Listener".
	TypeURL string

	// TypeName is a short name for logs and errors, for example "Listener".
	TypeName string

	// AllResourcesRequiredInSotW says that a State-of-the-World response of
	// this type carries every subscribed resource that exists, so that a
	// resource absent from a response has been deleted (Listener and
	// Cluster, per the xDS protocol and gRFC A27).
	AllResourcesRequiredInSotW bool

	// Decode unmarshals and validates one resource (gRFC A27: validation
	// failure means NACK). It returns the resource name whenever it can be
	// read, also together with a non-nil error: the error is then attributed
	// to that resource (it is named in the NACK, its watchers hear of it).
	// An error with an empty name is reported in the NACK only.
	//
	// Decode is called on the client's serializer, one resource at a time;
	// it must not block and must not call back into the client. Its result
	// must depend only on its input: the client does not call it again for
	// a resource whose bytes are those of the last value it accepted for
	// that name from the same management server (a re-send on a new
	// stream, a re-add after a deletion), and reuses that value.
	Decode func(in DecodeInput) (name string, data ResourceData, err error)
}

// typeSuffix returns the part of the type URL after the last '/', the
// resource type as it appears in xdstp names (gRFC A47), for example
// "envoy.config.listener.v3.Listener".
func (rt *ResourceType) typeSuffix() string {
	u := rt.TypeURL
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] == '/' {
			return u[i+1:]
		}
	}
	return u
}

// DecodeInput is what a ResourceType's Decode gets.
type DecodeInput struct {
	// Resource is the resource as received; its TypeUrl matches the
	// ResourceType (the client unwraps envoy.service.discovery.v3.Resource
	// wrappers and rejects other type mismatches before calling Decode).
	// Decode must not modify it.
	Resource *anypb.Any
	// Bootstrap is the client's bootstrap configuration.
	Bootstrap *bootstrap.Config
	// Server is the management server the resource came from.
	Server *bootstrap.ServerConfig
	// Previous is the last value this client decoded for a resource of the
	// same type and name, if it still has one (the resource may have been
	// deleted since); nil otherwise. A decoder may reuse the parts of it
	// that the new resource leaves unchanged, as long as the result is what
	// decoding from scratch would give.
	Previous ResourceData
}

// ResourceData is a decoded, validated resource. It must be immutable: the
// client hands the same value to every watcher and keeps it in its cache.
type ResourceData interface {
	// Equal reports whether the other value (of the same resource type) is
	// the same resource. The client uses it to drop identical re-sends, so
	// watchers are not called when nothing changed.
	Equal(other ResourceData) bool
}

// ResourceWatcher receives the updates of one watched resource.
//
// Its methods are called one at a time, in order, on the client's serializer
// goroutine (the same goroutine for every watcher of a client), and never
// while the client holds a lock. Each call must call onDone once it has
// finished with the update, possibly later and from another goroutine: until
// every watcher told of an ADS response has called onDone, the ADS stream
// that delivered it reads no further response (flow control). A method may
// call the client (start or cancel watches, Dump) but must not block on
// another callback of the same client.
type ResourceWatcher interface {
	// ResourceChanged delivers a new value of the resource. It is called
	// only when the value differs (ResourceData.Equal) from the last one
	// delivered to this watcher.
	ResourceChanged(data ResourceData, onDone func())

	// ResourceError says the resource is unavailable: it does not exist
	// (errors.Is(err, ErrResourceDoesNotExist): the does-not-exist timer
	// fired, or it was deleted from a State-of-the-World response), it was
	// NACKed and no valid value was ever received, its timer fired under
	// the resource_timer_is_transient_error server feature (KindTimeout),
	// the server sent an error for it and no valid value was received
	// (KindReceivedError), its name is invalid, or its authority is not in
	// the bootstrap. The watcher should stop using any value it had. A later
	// ResourceChanged may follow.
	ResourceError(err error, onDone func())

	// AmbientError reports a problem that does not invalidate the last value
	// delivered: a NACKed update of a cached resource, an error the server
	// sent for a cached resource (KindReceivedError), or a connectivity
	// problem with the management server. A watcher that has a value keeps
	// using it; a watcher that has none yet (connectivity errors are
	// reported to every watcher of the server) can use the error to explain
	// why. See the package documentation for the choice made here.
	AmbientError(err error, onDone func())
}

// TypedWatcher is a ResourceWatcher for one concrete ResourceData type, used
// with Watch. The same calling contract as ResourceWatcher applies.
type TypedWatcher[T ResourceData] interface {
	ResourceChanged(data T, onDone func())
	ResourceError(err error, onDone func())
	AmbientError(err error, onDone func())
}

// ResourceWatchStarter is what Watch needs of a client: *Client, or a
// consumer's fake of it in tests.
type ResourceWatchStarter interface {
	WatchResource(rt *ResourceType, name string, w ResourceWatcher) (cancel func())
}

// Watch is c.WatchResource with a typed watcher. Data of another Go type
// than T (a ResourceType whose Decode returns something else) is reported to
// w as a ResourceError.
func Watch[T ResourceData](c ResourceWatchStarter, rt *ResourceType, name string, w TypedWatcher[T]) (cancel func()) {
	return c.WatchResource(rt, name, typedAdapter[T]{w: w, typeName: rt.TypeName})
}

// typedAdapter turns a TypedWatcher into a ResourceWatcher.
type typedAdapter[T ResourceData] struct {
	w        TypedWatcher[T]
	typeName string
}

func (a typedAdapter[T]) ResourceChanged(data ResourceData, onDone func()) {
	t, ok := data.(T)
	if !ok {
		a.w.ResourceError(&decodeTypeError{typeName: a.typeName, got: data}, onDone)
		return
	}
	a.w.ResourceChanged(t, onDone)
}

func (a typedAdapter[T]) ResourceError(err error, onDone func()) { a.w.ResourceError(err, onDone) }
func (a typedAdapter[T]) AmbientError(err error, onDone func())  { a.w.AmbientError(err, onDone) }
