package xdsclient

import (
	"context"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
)

// ResourceStatus is the cache state of a resource, as CSDS reports it
// (gRFC A40). A resource starts Requested; it becomes ACKed when a valid
// value arrives, NACKed when a value is rejected (the last valid value, if
// any, is kept), and DoesNotExist when its timer fires or a
// State-of-the-World response no longer carries it (unless deletions are
// ignored, gRFC A53: it then stays ACKed). Any state can go to ACKed.
type ResourceStatus int

const (
	StatusRequested ResourceStatus = iota + 1
	StatusDoesNotExist
	StatusACKed
	StatusNACKed
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
	default:
		return "UNKNOWN"
	}
}

// UpdateErrorState describes the last rejected update of a resource
// (gRFC A40, envoy.admin.v3.UpdateFailureState).
type UpdateErrorState struct {
	// Version is the version_info of the rejected response.
	Version string
	// Reason is why the resource was rejected.
	Reason string
	// Time is when it was rejected.
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
	Status      ResourceStatus
	// Error is set when Status is StatusNACKed.
	Error *UpdateErrorState
}

// Dump returns the state of every watched resource, sorted by type URL and
// name. The values are copies; Raw is shared and must not be modified. A
// closed client dumps nothing. Dump may be called from a watcher callback.
func (c *Client) Dump() []ResourceDump {
	var out []ResourceDump
	collect := func(context.Context) { out = c.dumpResources() }
	if c.onSerializer() {
		collect(nil)
		return out
	}
	done := make(chan struct{})
	if !c.serializer.TrySchedule(func(ctx context.Context) { collect(ctx); close(done) }) {
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
				if s.nack != nil {
					e := *s.nack
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
