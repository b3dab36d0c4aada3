package xdsclient

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// resourceWrapperURL is the type URL of envoy.service.discovery.v3.Resource,
// which a server may wrap resources in.
const resourceWrapperURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// decoded is the outcome of decoding one resource of a response.
type decoded struct {
	data ResourceData
	raw  *anypb.Any
	err  error
}

// handleResponse applies one ADS response and ACKs or NACKs it. release is
// called once every watcher notified has called onDone. Only called from
// serializer callbacks.
func (c *Client) handleResponse(ch *xdsChannel, gen uint64, resp *discoverypb.DiscoveryResponse, release func()) {
	fc := newFlowControl(release)
	defer fc.done()
	if ch.closed || c.closed.HasFired() || gen != ch.streamGen {
		return
	}
	ch.failing = false
	ch.connected = true
	c.switchBack(ch)

	typeURL := resp.GetTypeUrl()
	ts := ch.typeState(typeURL)
	ts.nonce = resp.GetNonce()
	rt := c.types[typeURL]
	if rt == nil {
		c.metrics.updates(ch.server.ServerURI, typeSuffix(typeURL), 0, int64(len(resp.GetResources())))
		c.nack(ch, ts, typeURL, resp, []string{fmt.Sprintf("unknown resource type %q", typeURL)})
		return
	}
	results, valid, errs, unnamed := c.decodeAll(ch, rt, resp)
	c.metrics.updates(ch.server.ServerURI, rt.typeSuffix(), int64(valid), int64(len(errs)))
	now := c.opts.Clock.Now()
	// gRFC A40 "continue after first error": the error of a rejected
	// response is recorded on every resource it carried, valid or not.
	var rejected *UpdateErrorState
	if len(errs) > 0 {
		rejected = &UpdateErrorState{Version: resp.GetVersionInfo(), Reason: strings.Join(errs, "; "), Time: now}
	}
	// The answer goes out before the watchers run: it depends only on the
	// decoding, and its sender is then started first. Starting a goroutine
	// makes it the next to run, so the watcher's, started after, runs as
	// soon as this one waits, and the sender after it. With many servers in
	// one process, each server then applies its update before the process
	// moves on to the next server's (the other order delays every server's
	// update behind the other servers' writes). Dumps read the state on
	// the serializer, so none sees the ACK without the update.
	if len(errs) > 0 {
		c.nack(ch, ts, typeURL, resp, errs)
	} else {
		ts.version = resp.GetVersionInfo()
		ch.enqueue(typeURL, ts.version, ts.nonce, ch.subscribedNames(typeURL), nil)
	}
	u := update{ch: ch, rt: rt, version: resp.GetVersionInfo(), results: results, rejected: rejected, now: now, fc: fc, unnamed: unnamed}
	for a := range ch.users {
		c.apply(a, u)
		c.applyResourceErrors(a, u, resp.GetResourceErrors())
	}
}

// update is one decoded response, as apply needs it.
type update struct {
	ch       *xdsChannel
	rt       *ResourceType
	version  string
	results  map[string]decoded // by canonical name
	rejected *UpdateErrorState  // nil when the response is ACKed
	now      time.Time
	fc       *flowControl
	// unnamed is set when some resource of the response could not be
	// decoded far enough to read its name: the response may carry any
	// subscribed resource, so absence from it deletes nothing.
	unnamed bool
}

// nack sends a NACK: the last accepted version, the response's nonce and an
// INVALID_ARGUMENT error_detail listing every problem (gRFC A40, A46). Only
// called from serializer callbacks.
func (c *Client) nack(ch *xdsChannel, ts *typeState, typeURL string, resp *discoverypb.DiscoveryResponse, errs []string) {
	msg := fmt.Sprintf("xdsclient: rejected response version %q nonce %q for type %q [xds node id %q]: %s",
		resp.GetVersionInfo(), resp.GetNonce(), typeURL, c.nodeID, strings.Join(errs, "; "))
	logger.Warning(msg)
	ch.enqueue(typeURL, ts.version, ts.nonce, ch.subscribedNames(typeURL), status.New(codes.InvalidArgument, msg).Proto())
}

// decodeAll decodes every resource of resp, continuing after errors (gRFC
// A40). results is keyed by canonical name; valid counts the resources that
// decoded; errs has one "name: reason" entry per failed resource; unnamed
// reports a resource whose name could not be read. Only called from
// serializer callbacks.
//
// A resource that no user of ch watches is skipped without being decoded or
// validated, as gRFC A27 has a client ignore what it did not ask for: a
// server may send more (istiod answers a request with no names with every
// Listener of the node, clients' ones included), and a NACK for such a
// resource would reject what the client never subscribed to.
func (c *Client) decodeAll(ch *xdsChannel, rt *ResourceType, resp *discoverypb.DiscoveryResponse) (results map[string]decoded, valid int, errs []string, unnamed bool) {
	results = make(map[string]decoded, len(resp.GetResources()))
	for i, raw := range resp.GetResources() {
		var s *resourceState
		if name, ok := peekName(raw); ok {
			if s = ch.watched(rt.TypeURL, canonicalOrEmpty(name)); s == nil {
				continue
			}
		}
		name, d := c.decodeOne(ch, rt, raw, s)
		if name == "" {
			errs = append(errs, fmt.Sprintf("resource %d: %v", i, d.err))
			unnamed = true
			continue
		}
		if _, dup := results[name]; dup {
			d = decoded{err: errors.New("duplicate resource name in the response")}
		}
		if d.err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, d.err))
		} else {
			valid++
		}
		results[name] = d
	}
	return results, valid, errs, unnamed
}

// decodeOne decodes one resource; name is canonical, or "" if unknown. s
// is the state of the resource's peeked name, if any: its last decoded
// value is DecodeInput.Previous, and is reused as it is when the bytes are
// the ones it was decoded from. Only called from serializer callbacks.
func (c *Client) decodeOne(ch *xdsChannel, rt *ResourceType, raw *anypb.Any, s *resourceState) (string, decoded) {
	wrapperName := ""
	if raw.GetTypeUrl() == resourceWrapperURL {
		w := &discoverypb.Resource{}
		if err := proto.Unmarshal(raw.GetValue(), w); err != nil {
			return "", decoded{err: fmt.Errorf("invalid Resource wrapper: %w", err)}
		}
		wrapperName, raw = w.GetName(), w.GetResource()
	}
	if raw.GetTypeUrl() != rt.TypeURL {
		err := fmt.Errorf("type %q in a response of type %q", raw.GetTypeUrl(), rt.TypeURL)
		return canonicalOrEmpty(wrapperName), decoded{err: err}
	}
	var prev ResourceData
	if s != nil && s.decoded != nil {
		if s.decodedServer == ch.server && bytes.Equal(s.decodedRaw.GetValue(), raw.GetValue()) {
			return s.name, decoded{data: s.decoded, raw: raw}
		}
		prev = s.decoded
	}
	name, data, err := rt.Decode(DecodeInput{Resource: raw, Bootstrap: c.cfg, Server: ch.server, Previous: prev})
	if name == "" {
		name = wrapperName
	}
	if err == nil && data == nil {
		err = errors.New("decoder returned no data")
	}
	if err == nil && name == "" {
		err = errors.New("resource has no name")
	}
	return canonicalOrEmpty(name), decoded{data: data, raw: raw, err: err}
}

// typeSuffix is ResourceType.typeSuffix for a bare type URL.
func typeSuffix(typeURL string) string { return (&ResourceType{TypeURL: typeURL}).typeSuffix() }

func canonicalOrEmpty(name string) string {
	if name == "" {
		return ""
	}
	rn, err := parseName(name)
	if err != nil {
		return name
	}
	return rn.canonical
}

// apply updates the resources of a with the decoded results of a response.
// Only called from serializer callbacks.
func (c *Client) apply(a *authority, u update) {
	for name, s := range a.resources[u.rt.TypeURL] {
		d, ok := u.results[name]
		switch {
		case !ok:
			// A resource whose name could not be read may be this one: a
			// rejected response must not delete what it might carry.
			if u.rt.AllResourcesRequiredInSotW && !u.unnamed {
				c.applyAbsent(a, u.ch, s, u.fc)
			}
		case d.err != nil:
			s.stopTimer()
			c.applyNACK(s, u, d.err)
		default:
			s.stopTimer()
			c.applyGood(s, u, d)
		}
	}
}

// applyGood stores an accepted value and tells the watchers if it changed.
// The error state is the response's: nil when it was ACKed. Only called
// from serializer callbacks.
func (c *Client) applyGood(s *resourceState, u update, d decoded) {
	if s.ignored {
		logger.Infof("xdsclient: %s resource %q is back after its deletion was ignored [xds node id %q]", s.rt.TypeName, s.name, c.nodeID)
		s.ignored = false
	}
	s.decoded, s.decodedRaw, s.decodedServer = d.data, d.raw, u.ch.server
	changed := s.data == nil || !s.data.Equal(d.data)
	s.status, s.errState, s.lastErr = StatusACKed, u.rejected, nil
	s.version, s.raw, s.lastUpdated, s.from = u.version, d.raw, u.now, u.ch
	if !changed {
		return
	}
	s.data = d.data
	s.notifyData(u.fc)
}

// applyNACK records a rejected resource. Watchers keep a cached value and
// hear an AmbientError; without one they hear a ResourceError (gRFC A46,
// A88). Only called from serializer callbacks.
func (c *Client) applyNACK(s *resourceState, u update, cause error) {
	s.status = StatusNACKed
	s.errState = u.rejected
	s.lastErr = &Error{Kind: KindNACK, TypeName: s.rt.TypeName, Name: s.name, Server: u.ch.server.ServerURI, NodeID: c.nodeID, Err: cause}
	s.notifyError(s.data == nil, s.lastErr, u.fc)
}

// applyResourceErrors records the errors the server sent for resources of
// a instead of the resources (xRFC TP3, gRFC A88): the timer stops, the
// status becomes StatusReceivedError, and watchers keep a cached value and
// hear an AmbientError or, without one, a ResourceError. An error for a
// resource that the same response also carries is ignored. Only called
// from serializer callbacks.
func (c *Client) applyResourceErrors(a *authority, u update, errs []*discoverypb.ResourceError) {
	for _, re := range errs {
		name := canonicalOrEmpty(re.GetResourceName().GetName())
		s := a.resources[u.rt.TypeURL][name]
		if s == nil {
			continue
		}
		if _, ok := u.results[name]; ok {
			continue
		}
		s.stopTimer()
		st := status.FromProto(re.GetErrorDetail())
		if st.Code() == codes.OK {
			st = status.New(codes.Unknown, "resource error without a status: "+st.Message())
		}
		s.status = StatusReceivedError
		s.errState = &UpdateErrorState{Version: u.version, Reason: fmt.Sprintf("%v: %s", st.Code(), st.Message()), Time: u.now}
		s.lastErr = &Error{Kind: KindReceivedError, TypeName: s.rt.TypeName, Name: s.name, Server: u.ch.server.ServerURI, NodeID: c.nodeID, Err: st.Err()}
		logger.Warningf("xdsclient: management server %q sent an error for %s resource %q: %v [xds node id %q]", u.ch.server, s.rt.TypeName, s.name, st.Err(), c.nodeID)
		s.notifyError(s.data == nil, s.lastErr, u.fc)
	}
}

// applyAbsent handles a cached resource missing from a State-of-the-World
// response of a type that requires all resources: a deletion, unless the
// server has ignore_resource_deletion (gRFC A53). A resource that was never
// received is left to its timer: the response may answer an older request.
// A lower-priority (fallback) server cannot delete a value that a
// higher-priority server of the authority supplied (gRFC A71: cached
// resources from the primary keep serving during fallback). Only called
// from serializer callbacks.
func (c *Client) applyAbsent(a *authority, ch *xdsChannel, s *resourceState, fc *flowControl) {
	if s.data == nil {
		return
	}
	if from := a.index(s.from); from >= 0 && a.index(ch) > from {
		return
	}
	if ch.server.IgnoreResourceDeletion {
		if !s.ignored {
			s.ignored = true
			logger.Warningf("xdsclient: ignoring deletion of %s resource %q by management server %q (ignore_resource_deletion) [xds node id %q]",
				s.rt.TypeName, s.name, ch.server, c.nodeID)
		}
		return
	}
	s.status, s.data, s.raw, s.version, s.errState, s.from = StatusDoesNotExist, nil, nil, "", nil, nil
	s.lastErr = &Error{Kind: KindDoesNotExist, TypeName: s.rt.TypeName, Name: s.name, Server: ch.server.ServerURI, NodeID: c.nodeID,
		Err: errors.New("removed by the management server")}
	s.notifyError(true, s.lastErr, fc)
}

// peekName reads the name of a resource without decoding it: the name of
// its Resource wrapper, or else field 1 of the message, which is the name of
// every xDS resource type (Listener.name, RouteConfiguration.name,
// Cluster.name, ClusterLoadAssignment.cluster_name). ok is false when the
// bytes cannot be read that far or the name is empty; the resource is then
// decoded, and its errors reported, as usual.
func peekName(raw *anypb.Any) (string, bool) {
	b := raw.GetValue()
	wrapped := raw.GetTypeUrl() == resourceWrapperURL
	// The last occurrence of a field wins, as in proto.Unmarshal.
	var name, inner []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		switch {
		case !wrapped && num == 1, wrapped && num == 3: // name, Resource.name
			name = v
		case wrapped && num == 2: // Resource.resource
			inner = v
		}
	}
	if len(name) > 0 {
		return string(name), true
	}
	if wrapped && inner != nil {
		a := &anypb.Any{}
		if proto.Unmarshal(inner, a) != nil {
			return "", false
		}
		return peekName(a)
	}
	return "", false
}
