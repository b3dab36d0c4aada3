// Package typedconfig reads the typed configs of xDS resources: an Any whose
// type URL names the config's message, or a TypedStruct (udpa.type.v1 or
// xds.type.v3) that names it in its own type_url and holds it as a Struct.
// gRFC A36 and A39 say the type of a config in a TypedStruct is its
// type_url.
//
// The package is pure: no gRPC, no goroutines, no I/O.
package typedconfig

import (
	"encoding/json"
	"fmt"
	"strings"

	udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type names of the TypedStruct wrappers.
const (
	TypedStructV1 = "udpa.type.v1.TypedStruct"
	TypedStructV3 = "xds.type.v3.TypedStruct"
)

// Name returns the type name of a type URL: what follows its last '/'
// ("type.googleapis.com/envoy.config.rbac.v3.RBAC" -> "envoy.config.rbac.v3.RBAC").
func Name(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

// Is reports whether Name(url) == name, for a name without '/', without
// copying or searching the URL.
func Is(url, name string) bool {
	n := len(url) - len(name)
	return strings.HasSuffix(url, name) && (n == 0 || url[n-1] == '/')
}

// Config is a typed config with its TypedStruct wrapper, if any, looked
// through.
type Config struct {
	// TypeURL is the config's type: the Any's type URL, or the type_url
	// inside a TypedStruct.
	TypeURL string
	// Any is the value: a message of TypeURL, or nil when Struct is set.
	Any *anypb.Any
	// Struct is the TypedStruct's value when the config came in one; never
	// nil then (an empty Struct for an absent value).
	Struct *structpb.Struct
}

// Unwrap returns the config in a: a itself, or the content of a
// TypedStruct. A malformed TypedStruct is an error; a nil a is a Config with
// an empty TypeURL.
func Unwrap(a *anypb.Any) (Config, error) {
	var ts interface {
		proto.Message
		GetTypeUrl() string
		GetValue() *structpb.Struct
	}
	switch url := a.GetTypeUrl(); {
	case Is(url, TypedStructV1):
		ts = &udpatypepb.TypedStruct{}
	case Is(url, TypedStructV3):
		ts = &xdstypepb.TypedStruct{}
	default:
		return Config{TypeURL: url, Any: a}, nil
	}
	if err := proto.Unmarshal(a.GetValue(), ts); err != nil {
		return Config{}, fmt.Errorf("malformed %s: %w", Name(a.GetTypeUrl()), err)
	}
	s := ts.GetValue()
	if s == nil {
		s = &structpb.Struct{}
	}
	return Config{TypeURL: ts.GetTypeUrl(), Struct: s}, nil
}

// UnmarshalTo decodes the config into m, whose type must be TypeURL's. A
// TypedStruct value is converted through its JSON form, as Envoy does.
func (c Config) UnmarshalTo(m proto.Message) error {
	if want := string(m.ProtoReflect().Descriptor().FullName()); Name(c.TypeURL) != want {
		return fmt.Errorf("config has type %q, want %q", c.TypeURL, "type.googleapis.com/"+want)
	}
	if c.Struct != nil {
		js, err := protojson.Marshal(c.Struct)
		if err != nil {
			return fmt.Errorf("TypedStruct value: %w", err)
		}
		if err := protojson.Unmarshal(js, m); err != nil {
			return fmt.Errorf("TypedStruct value is not a valid %s: %w", Name(c.TypeURL), err)
		}
		return nil
	}
	if c.Any == nil {
		return fmt.Errorf("config of type %q is empty", c.TypeURL)
	}
	if err := proto.Unmarshal(c.Any.GetValue(), m); err != nil {
		return fmt.Errorf("malformed %s: %w", Name(c.TypeURL), err)
	}
	return nil
}

// JSON returns the config as JSON: a TypedStruct's value, or the message
// converted with protojson when its type is linked into the program; "{}"
// for an empty TypedStruct or a type the program does not know.
func (c Config) JSON() (json.RawMessage, error) {
	var m proto.Message = c.Struct
	if c.Struct == nil {
		mt, err := protoregistry.GlobalTypes.FindMessageByURL(c.TypeURL)
		if err != nil {
			return json.RawMessage("{}"), nil
		}
		m = mt.New().Interface()
		if err := c.UnmarshalTo(m); err != nil {
			return nil, err
		}
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%s to JSON: %w", Name(c.TypeURL), err)
	}
	if len(b) == 0 {
		b = []byte("{}")
	}
	return b, nil
}
