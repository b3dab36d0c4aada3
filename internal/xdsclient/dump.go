package xdsclient

import (
	"context"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
)

// ResourceStatus is the cache state of a resource, as CSDS reports it
// (gRFC A40, A88). A resource starts Requested; it becomes ACKed when a
// valid value arrives, NACKed when a value is rejected (the last valid
// value, if any, is kept), DoesNotExist when its timer fires or a
// State-of-the-World response no longer carries it (unless deletions are
// ignored, gRFC A53: it then stays ACKed), Timeout instead of DoesNotExist
// when its timer fires and the server has the
// "resource_timer_is_transient_error" feature, and ReceivedError when the
// management server sends an error for it (xRFC TP3 resource_errors; the
// last valid value, if any, is kept). Any state can go to ACKed.
type ResourceStatus int

// The values of ResourceStatus; each maps to the CSDS ClientResourceStatus
// of the same name.
const (
	StatusRequested ResourceStatus = iota + 1
	StatusDoesNotExist
	StatusACKed
	StatusNACKed
	StatusReceivedError
	StatusTimeout
)

// String returns the CSDS name of the status.
func (s ResourceStatus) String() string {
	switch s {
	case StatusRequested:
		return "REQUESTED"
	case StatusDoesNotExist:
		return "DOES_NOT_EXIST"
	case StatusACKed:
		return "ACKED"
	case StatusNACKed:
		return "NACKED"
	case StatusReceivedError:
		return "RECEIVED_ERROR"
	case StatusTimeout:
		return "TIMEOUT"
	default:
		return "UNKNOWN"
	}
}

// UpdateErrorState describes the last failed update of a resource (gRFC
// A40, envoy.admin.v3.UpdateFailureState): a rejected (NACKed) response
// that carried the resource, or an error the management server sent for it
// (xRFC TP3).
type UpdateErrorState struct {
	// Version is the version_info of the failed response.
	Version string
	// Reason is why the response was rejected: every problem found in it,
	// not only those of this resource (gRFC A40 attaches the error to every
	// resource of the response), or the error the server sent.
	Reason string
	// Time is when the response was handled.
	Time time.Time
}

// ResourceDump is the state of one watched resource.
type ResourceDump struct {
	TypeURL string
	// Name is the canonical resource name.
	Name string
	// Version is the version_info of the response that carried Raw; empty
	// when there is no value.
	Version string
	// Raw is the last accepted value exactly as received; nil when there
	// is none.
	Raw *anypb.Any
	// LastUpdated is when Raw was received.
	LastUpdated time.Time
	// Status is the cache state.
	Status ResourceStatus
	// Error is the last failed update. It is set when Status is
	// StatusNACKed or StatusReceivedError, and also when Status is
	// StatusACKed if the response that carried the accepted value was
	// rejected because of other resources (gRFC A40 "continue after first
	// error": valid resources of a NACKed response are applied, gRFC A46,
	// and show the response's error state). The next accepted response
	// that carries the resource clears it.
	Error *UpdateErrorState
}

// Dump returns the state of every watched resource, sorted by type URL and
// name. The values are copies; Raw is shared and must not be modified. A
// closed client dumps nothing. Dump reads the cache on the client's
// serializer, so it waits for a running watcher callback and must not be
// called from one.
func (c *Client) Dump() []ResourceDump {
	var out []ResourceDump
	done := make(chan struct{})
	if !c.serializer.TrySchedule(func(context.Context) { out = c.dumpResources(); close(done) }) {
		return nil
	}
	<-done
	return out
}

// dumpResources builds the dump. Only called from serializer callbacks.
func (c *Client) dumpResources() []ResourceDump {
	if c.closed.HasFired() {
		return nil
	}
	var out []ResourceDump
	for _, a := range c.allAuthorities() {
		for typeURL, states := range a.resources {
			for _, s := range states {
				d := ResourceDump{
					TypeURL:     typeURL,
					Name:        s.name,
					Version:     s.version,
					Raw:         s.raw,
					LastUpdated: s.lastUpdated,
					Status:      s.status,
				}
				if s.errState != nil {
					e := *s.errState
					d.Error = &e
				}
				out = append(out, d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].TypeURL != out[j].TypeURL {
			return out[i].TypeURL < out[j].TypeURL
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// ServerStatus is the state of the client's connection to one management
// server, as Servers reports it.
type ServerStatus struct {
	// URI is the server's server_uri from the bootstrap.
	URI string
	// Connected is gRFC A78's grpc.xds_client.connected: an ADS stream is
	// up, or is being re-established after one that received a response.
	Connected bool
	// StreamUp reports that an ADS stream is open now.
	StreamUp bool
	// LastError is how the last ADS stream (or attempt to open one) ended,
	// and LastErrorTime when; nil and zero if none has.
	LastError     error
	LastErrorTime time.Time
}

// Servers returns the state of the client's connections to management
// servers, sorted by URI. It reads the state on the client's serializer, so
// it waits for a running watcher callback and must not be called from one.
// A closed client returns nil.
func (c *Client) Servers() []ServerStatus {
	var out []ServerStatus
	done := make(chan struct{})
	if !c.serializer.TrySchedule(func(context.Context) {
		defer close(done)
		if c.closed.HasFired() {
			return
		}
		for _, ch := range c.channels {
			out = append(out, ServerStatus{
				URI:           ch.server.ServerURI,
				Connected:     ch.connected,
				StreamUp:      ch.streamGen != 0,
				LastError:     ch.lastErr,
				LastErrorTime: ch.lastErrAt,
			})
		}
	}) {
		return nil
	}
	<-done
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out
}
