package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	// protojson resolves the "@type" of a typed_config only for message types
	// linked into the program. These are the ones an xDS server uses: the
	// HTTP filters it runs (router, RBAC, local and global rate limit, fault
	// injection, ext_authz, and their per-route configs), the access loggers
	// of an HttpConnectionManager's access_log (file, stdout, stderr), the
	// TLS transport socket, and TypedStruct (an HttpConnectionManager may be
	// wrapped in one). HttpConnectionManager itself is imported above.
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "github.com/cncf/xds/go/xds/type/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// resources is the content of a resources file, in the file's order.
type resources struct {
	listeners []*listenerpb.Listener
	routes    []*routepb.RouteConfiguration
}

// loadResources reads and parses the resources file at path.
func loadResources(path string) (*resources, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return nil, fmt.Errorf("%s: YAML is not supported, only JSON (convert it, e.g. with `yq -o=json`)", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := parseResources(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// documentType describes the file as a message
//
//	message Document {
//	  repeated envoy.config.listener.v3.Listener listeners = 1;
//	  repeated envoy.config.route.v3.RouteConfiguration routes = 2;
//	}
//
// so that protojson parses the whole file at once: it rejects unknown fields
// at every level, and its errors give lines and columns in the file.
var documentType = func() protoreflect.MessageType {
	repeated := func(name string, number int32, typ protoreflect.FullName) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{
			Name:     proto.String(name),
			JsonName: proto.String(name),
			Number:   proto.Int32(number),
			Label:    descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum(),
			Type:     descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
			TypeName: proto.String("." + string(typ)),
		}
	}
	listener := (&listenerpb.Listener{}).ProtoReflect().Descriptor()
	route := (&routepb.RouteConfiguration{}).ProtoReflect().Descriptor()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("examples/controlplane/document.proto"),
		Package:    proto.String("controlplane"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{listener.ParentFile().Path(), route.ParentFile().Path()},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Document"),
			Field: []*descriptorpb.FieldDescriptorProto{
				repeated("listeners", 1, listener.FullName()),
				repeated("routes", 2, route.FullName()),
			},
		}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		panic(err) // the descriptor above is constant
	}
	return dynamicpb.NewMessageType(fd.Messages().Get(0))
}()

// parseResources parses a resources file's content and checks that every
// resource has a name, unique within its type.
func parseResources(data []byte) (*resources, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the file is empty") // often: caught in the middle of a save
	}
	doc := documentType.New()
	if err := protojson.Unmarshal(data, doc.Interface()); err != nil {
		return nil, err
	}
	r := &resources{}
	fields := doc.Descriptor().Fields()
	if err := convertList(doc.Get(fields.ByName("listeners")).List(), &r.listeners); err != nil {
		return nil, err
	}
	if err := convertList(doc.Get(fields.ByName("routes")).List(), &r.routes); err != nil {
		return nil, err
	}
	if err := checkNames("listeners", r.listeners); err != nil {
		return nil, err
	}
	if err := checkNames("routes", r.routes); err != nil {
		return nil, err
	}
	return r, nil
}

// convertList converts the dynamic messages of list into generated ones.
func convertList[M any, PM interface {
	*M
	proto.Message
}](list protoreflect.List, out *[]PM) error {
	for i := range list.Len() {
		b, err := proto.Marshal(list.Get(i).Message().Interface())
		if err != nil {
			return err
		}
		m := PM(new(M))
		if err := proto.Unmarshal(b, m); err != nil {
			return err
		}
		*out = append(*out, m)
	}
	return nil
}

func checkNames[M interface{ GetName() string }](field string, ms []M) error {
	seen := make(map[string]bool, len(ms))
	for i, m := range ms {
		switch name := m.GetName(); {
		case name == "":
			return fmt.Errorf("%s[%d] has no name", field, i)
		case seen[name]:
			return fmt.Errorf("%s[%d]: a second resource named %q", field, i, name)
		default:
			seen[name] = true
		}
	}
	return nil
}

// missingRoutes returns, for each RouteConfiguration name that a Listener's
// HttpConnectionManager asks for with RDS but r does not define, a sentence
// saying so. A server would wait for it forever, which is worth a warning
// but is not an error: the file may be edited again.
func (r *resources) missingRoutes() []string {
	defined := make(map[string]bool, len(r.routes))
	for _, rc := range r.routes {
		defined[rc.GetName()] = true
	}
	var missing []string
	for _, l := range r.listeners {
		chains := l.GetFilterChains()
		if dc := l.GetDefaultFilterChain(); dc != nil {
			chains = append(chains[:len(chains):len(chains)], dc)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				hcm := &hcmpb.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue // not an HttpConnectionManager; the server judges it
				}
				if name := hcm.GetRds().GetRouteConfigName(); name != "" && !defined[name] {
					missing = append(missing, fmt.Sprintf("listener %q, filter chain %q: RouteConfiguration %q is not in the file", l.GetName(), fc.GetName(), name))
				}
			}
		}
	}
	return missing
}

// names returns the names of ms.
func names[M interface{ GetName() string }](ms []M) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetName()
	}
	return out
}
