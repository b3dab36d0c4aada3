// Package grpccompat holds what this module relies on in grpc-go beyond
// its documented API, each with a canary test that fails with a clear
// message when a grpc-go release changes it:
//
//   - ServerCreds reads the transport credentials of grpc.ServerOptions,
//     and HasUnknownServiceHandler whether they set grpc.UnknownServiceHandler;
//   - the server's connections (internal/server/connserver) offer
//     ReadOnReady, which grpc-go's transport calls to read into pooled
//     buffers only when data arrives (TestCanaryReadOnReady);
//   - a drain treats grpc-go's first SetDeadline on a connection, the
//     handshake deadline, as the sign that gRPC serves it
//     (TestCanaryHandshakeDeadlineFirst).
//
// ServerCreds finds which transport credentials a list of
// grpc.ServerOptions sets: the one thing about a user's options that an xDS
// server must know and that gRPC offers no public way to read.
//
// An xDS server must tell xDS credentials (which apply the filter chains'
// transport_socket) from any other credentials (which gRFC A29 says to use
// as they are), and must recognise grpc-go's own xDS credentials
// (google.golang.org/grpc/credentials/xds), which fall back to their
// fallback credentials, often plaintext, on a connection they cannot read
// xDS security from, and so on every connection of this library's server.
//
// grpc.Creds returns an option whose credentials are unexported. This
// package reads them by reflection: it runs each option's function on an
// empty copy of gRPC's option struct and reads its credentials field, as
// gRPC itself would when building a server. That relies on how grpc-go
// v1.85 lays out its options, so every step checks the shape it expects and
// fails with ErrUnknownShape, never with a wrong answer; the package's tests
// pin the shape against the grpc-go the module builds with.
//
// An option of another package takes effect through the field it embeds
// that gRPC's unexported method is promoted from (a grpc.ServerOption, or
// a type that embeds one, at any depth): that field is read as gRPC would
// call it, so grpc.Creds inside a user's wrapper type is found. An option
// that cannot be followed (wrapped deeper than maxDepth) fails with
// ErrUnreadable.
package grpccompat

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ErrUnknownShape means the options are not laid out as this package
// expects: grpc-go changed its option types.
var ErrUnknownShape = errors.New("grpc.ServerOption is not laid out as grpc-go v1.85 lays it out")

// ErrUnreadable means an option of another package could not be followed
// to the gRPC option it wraps: it may set credentials.
var ErrUnreadable = errors.New("a grpc.ServerOption wraps another beyond what can be read")

// maxDepth bounds how deep options are followed through wrapper types and
// joined lists: far more than any program nests them, and a bound for a
// value that wraps itself.
const maxDepth = 16

// grpcPkg is the package whose options are read; a variable for the tests
// of the error paths.
var grpcPkg = "google.golang.org/grpc"

var (
	credsType  = reflect.TypeFor[credentials.TransportCredentials]()
	optionType = reflect.TypeFor[grpc.ServerOption]()
)

// ServerCreds returns the transport credentials opts set, as a grpc.Server
// built with opts would use them: the last grpc.Creds wins, and nil means
// none was given (gRPC then serves plaintext). Options of other packages
// are followed to the option they embed (grpc.EmptyServerOption sets
// nothing). The error wraps ErrUnknownShape when an option of package grpc
// is not laid out as expected, ErrUnreadable when an option of another
// package cannot be followed: the credentials are then unknown.
func ServerCreds(opts []grpc.ServerOption) (credentials.TransportCredentials, error) {
	s, err := applyAll(opts)
	if s == nil || err != nil {
		return nil, err
	}
	return s.creds()
}

// applyAll applies opts in order to an empty gRPC option struct, as
// grpc.NewServer would: flattened to gRPC's own options first; nil without
// an option that sets anything.
func applyAll(opts []grpc.ServerOption) (*settings, error) {
	leaves, err := flattenAll(opts)
	if err != nil {
		return nil, err
	}
	return applyLeaves(leaves)
}

// applyLeaves applies flattened options in order (apply).
func applyLeaves(leaves []reflect.Value) (*settings, error) {
	var s *settings
	for _, o := range leaves {
		var err error
		if s, err = apply(s, o); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// HasUnknownServiceHandler reports whether opts set
// grpc.UnknownServiceHandler, read as ServerCreds reads the credentials
// (the same errors). Without one, gRPC refuses an RPC for a method no
// registered service has before any interceptor runs; with one, the RPC
// goes through the stream interceptors to it.
func HasUnknownServiceHandler(opts []grpc.ServerOption) (bool, error) {
	s, err := applyAll(opts)
	if s == nil || err != nil {
		return false, err
	}
	f := s.v.Elem().FieldByName("unknownStreamDesc")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*grpc.StreamDesc]() {
		return false, fmt.Errorf("%w: no field unknownStreamDesc of type *grpc.StreamDesc in %v", ErrUnknownShape, s.v.Type().Elem())
	}
	return !f.IsNil(), nil
}

// settings is an empty gRPC option struct, made on the first option that
// needs one, that the options are applied to in order.
type settings struct {
	v reflect.Value // a *grpc.serverOptions
}

// creds reads the credentials field of s.
func (s *settings) creds() (credentials.TransportCredentials, error) {
	f := s.v.Elem().FieldByName("creds")
	if !f.IsValid() || f.Type() != credsType {
		return nil, fmt.Errorf("%w: no field creds of type credentials.TransportCredentials in %v", ErrUnknownShape, s.v.Type().Elem())
	}
	c, _ := exported(f).Interface().(credentials.TransportCredentials)
	return c, nil
}

// apply applies o, an option of package grpc that is not a joined list
// (flatten's), to s (made if nil) and returns s.
func apply(s *settings, o reflect.Value) (*settings, error) {
	t := o.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Name() {
	case "EmptyServerOption":
		return s, nil
	case "funcServerOption":
		if o.Kind() != reflect.Pointer || o.IsNil() {
			return nil, fmt.Errorf("%w: %v is not a pointer to a struct", ErrUnknownShape, o.Type())
		}
		return applyFunc(s, o)
	}
	return nil, fmt.Errorf("%w: unknown option type %v", ErrUnknownShape, o.Type())
}

// promotedFrom returns the index of the embedded field of struct type t
// that grpc.ServerOption's method is promoted from, and how many embedded
// fields deep the method is declared (gRPC's type, or an interface): the
// shallowest, which must be unique, as Go's selector rules say. It looks at
// most budget levels deep.
func promotedFrom(t reflect.Type, budget int) (field, depth int, ok bool) {
	if budget <= 0 {
		return 0, 0, false
	}
	field, depth = -1, -1
	tie := false
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.Anonymous {
			continue
		}
		d, ok := methodDepth(f.Type, budget-1)
		if !ok {
			continue
		}
		switch {
		case depth < 0 || d < depth:
			field, depth, tie = i, d, false
		case d == depth:
			tie = true
		}
	}
	if field < 0 || tie {
		return 0, 0, false
	}
	return field, depth + 1, true
}

// methodDepth reports whether the embedded type t has grpc.ServerOption's
// method, and how deep below t it is declared.
func methodDepth(t reflect.Type, budget int) (int, bool) {
	if !t.Implements(optionType) && !reflect.PointerTo(t).Implements(optionType) {
		return 0, false
	}
	e := t
	if e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	switch {
	case t.Kind() == reflect.Interface || e.PkgPath() == grpcPkg:
		return 0, true
	case e.Kind() != reflect.Struct:
		return 0, false // no type of another package but a struct can embed it
	}
	_, d, ok := promotedFrom(e, budget)
	return d, ok
}

// applyFunc runs the function of a funcServerOption on s.
func applyFunc(s *settings, o reflect.Value) (*settings, error) {
	f := o.Elem().FieldByName("f")
	if !f.IsValid() || f.Kind() != reflect.Func || f.Type().NumIn() != 1 || f.Type().NumOut() != 0 ||
		f.Type().In(0).Kind() != reflect.Pointer || f.Type().In(0).Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %v has no field f func(*serverOptions)", ErrUnknownShape, o.Type())
	}
	if f.IsNil() {
		return s, nil
	}
	in := f.Type().In(0)
	if s == nil {
		s = &settings{v: reflect.New(in.Elem())}
	} else if s.v.Type() != in {
		return nil, fmt.Errorf("%w: options apply to both %v and %v", ErrUnknownShape, s.v.Type(), in)
	}
	if err := call(exported(f), s.v); err != nil {
		return nil, err
	}
	return s, nil
}

// call runs f(arg). Options only set fields, but one that panics on an
// empty struct must not take the server down with it.
func call(f, arg reflect.Value) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: an option panicked on an empty option struct: %v", ErrUnknownShape, r)
		}
	}()
	f.Call([]reflect.Value{arg})
	return nil
}

// exported returns v, an addressable unexported field, as a value that
// may be read and called.
func exported(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}
