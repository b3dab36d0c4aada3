package grpccompat

import (
	"fmt"
	"reflect"

	"google.golang.org/grpc"
)

// Interceptors are a program's grpc.ServerOptions with its single
// interceptors taken out.
//
// gRPC runs the interceptor of grpc.UnaryInterceptor (StreamInterceptor)
// before every chained one, and panics when either is set twice, so no
// option added to a program's can run ahead of it. An xDS server whose
// filters decide on an RPC in an interceptor of its own (work a filter
// leaves for after the tap) must run ahead of it, or that interceptor sees
// RPCs the filters refuse, and their headers before the filters change
// them: the server installs Unary and Stream itself, chained first after
// its own, which is where gRPC would have run them relative to the
// program's chained interceptors.
type Interceptors struct {
	// Options are the program's options without the ones that set Unary
	// and Stream, in the order given; the program's own list when it set
	// neither.
	Options []grpc.ServerOption
	// Unary and Stream are the interceptors of grpc.UnaryInterceptor and
	// grpc.StreamInterceptor; nil when not set.
	Unary  grpc.UnaryServerInterceptor
	Stream grpc.StreamServerInterceptor
}

// SplitInterceptors takes grpc.UnaryInterceptor and grpc.StreamInterceptor
// out of opts, following joined lists and options of other packages as
// ServerCreds does (such an option takes effect through the gRPC option it
// embeds, which replaces it in Options when the list is rebuilt). The error
// wraps ErrUnknownShape or ErrUnreadable, as ServerCreds's, when an option
// cannot be read: it may set either interceptor.
func SplitInterceptors(opts []grpc.ServerOption) (Interceptors, error) {
	leaves, err := flattenAll(opts)
	if err != nil {
		return Interceptors{}, err
	}
	out := Interceptors{Options: opts}
	var kept []grpc.ServerOption
	for _, leaf := range leaves {
		o, ok := leaf.Interface().(grpc.ServerOption)
		if !ok {
			return Interceptors{}, fmt.Errorf("%w: %v is not a grpc.ServerOption", ErrUnknownShape, leaf.Type())
		}
		s, err := apply(nil, leaf)
		if err != nil {
			return Interceptors{}, err
		}
		if s == nil {
			kept = append(kept, o)
			continue
		}
		u, st, err := s.singleInterceptors()
		if err != nil {
			return Interceptors{}, err
		}
		switch {
		case u == nil && st == nil:
			kept = append(kept, o)
		case u != nil && out.Unary != nil, st != nil && out.Stream != nil:
			return Interceptors{}, fmt.Errorf("grpc.UnaryInterceptor or grpc.StreamInterceptor is set twice, which gRPC refuses (it panics)")
		default:
			if u != nil {
				out.Unary = u
			}
			if st != nil {
				out.Stream = st
			}
		}
	}
	if out.Unary != nil || out.Stream != nil {
		out.Options = kept
	}
	return out, nil
}

// flattenAll returns the options of package grpc that opts apply, in order
// (flatten).
func flattenAll(opts []grpc.ServerOption) ([]reflect.Value, error) {
	var leaves []reflect.Value
	for _, o := range opts {
		var err error
		if leaves, err = flatten(leaves, reflect.ValueOf(o), 0); err != nil {
			return nil, err
		}
	}
	return leaves, nil
}

// flatten appends to leaves the options of package grpc that o applies, in
// order: the elements of a joined list, the option another package's type
// embeds.
func flatten(leaves []reflect.Value, o reflect.Value, depth int) ([]reflect.Value, error) {
	if o.Kind() == reflect.Interface {
		o = o.Elem()
	}
	if !o.IsValid() {
		return leaves, nil
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: %v is wrapped more than %d deep", ErrUnreadable, o.Type(), maxDepth)
	}
	t := o.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != grpcPkg {
		f, err := embeddedOption(o, depth)
		if err != nil || !f.IsValid() {
			return leaves, err
		}
		return flatten(leaves, f, depth+1)
	}
	if t.Name() == "joinServerOption" {
		if o.Kind() != reflect.Pointer || o.IsNil() {
			return nil, fmt.Errorf("%w: %v is not a pointer to a struct", ErrUnknownShape, o.Type())
		}
		list := o.Elem().FieldByName("opts")
		if !list.IsValid() || list.Kind() != reflect.Slice {
			return nil, fmt.Errorf("%w: grpc.JoinServerOptions has no opts slice", ErrUnknownShape)
		}
		list = exported(list)
		var err error
		for i := range list.Len() {
			if leaves, err = flatten(leaves, list.Index(i), depth+1); err != nil {
				return nil, err
			}
		}
		return leaves, nil
	}
	return append(leaves, o), nil
}

// embeddedOption returns the field of o, an option of another package,
// that gRPC's option method is promoted from (applyEmbedded's rule); the
// zero Value for a nil pointer.
func embeddedOption(o reflect.Value, depth int) (reflect.Value, error) {
	if o.Kind() == reflect.Pointer {
		if o.IsNil() {
			return reflect.Value{}, nil
		}
		o = o.Elem()
	}
	if o.Kind() != reflect.Struct {
		return reflect.Value{}, fmt.Errorf("%w: %v implements grpc.ServerOption without a struct to embed it in", ErrUnreadable, o.Type())
	}
	i, _, ok := promotedFrom(o.Type(), maxDepth-depth)
	if !ok {
		return reflect.Value{}, fmt.Errorf("%w: cannot tell which field of %v gRPC's option method comes from", ErrUnreadable, o.Type())
	}
	if !o.CanAddr() {
		c := reflect.New(o.Type()).Elem()
		c.Set(o)
		o = c
	}
	return exported(o.Field(i)), nil
}

// singleInterceptors reads the interceptors of grpc.UnaryInterceptor and
// grpc.StreamInterceptor from s, the settings of one option, and checks
// that an option setting one sets nothing else (so that taking it out
// takes out nothing more).
func (s *settings) singleInterceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor, error) {
	v := s.v.Elem()
	u := v.FieldByName("unaryInt")
	st := v.FieldByName("streamInt")
	if !u.IsValid() || u.Type() != reflect.TypeFor[grpc.UnaryServerInterceptor]() ||
		!st.IsValid() || st.Type() != reflect.TypeFor[grpc.StreamServerInterceptor]() {
		return nil, nil, fmt.Errorf("%w: no fields unaryInt and streamInt of gRPC's interceptor types in %v", ErrUnknownShape, v.Type())
	}
	unary, _ := exported(u).Interface().(grpc.UnaryServerInterceptor)
	stream, _ := exported(st).Interface().(grpc.StreamServerInterceptor)
	if unary == nil && stream == nil {
		return nil, nil, nil
	}
	rest := reflect.New(v.Type()).Elem()
	rest.Set(v)
	exported(rest.FieldByName("unaryInt")).SetZero()
	exported(rest.FieldByName("streamInt")).SetZero()
	if !rest.IsZero() {
		return nil, nil, fmt.Errorf("%w: an option that sets a single interceptor sets more", ErrUnknownShape)
	}
	return unary, stream, nil
}
