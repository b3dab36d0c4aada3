package grpccompat

import (
	"errors"
	"reflect"
	"testing"
)

// Option types of this test package that stand in for grpc-go's after a
// change of shape: with grpcPkg pointed here, ServerCreds reads them as it
// would read grpc-go's.
type (
	funcServerOption struct{ f func(*serverOptions) }
	serverOptions    struct{ creds any } // the field changed type
	joinServerOption struct{ opts int }  // the list changed type
	newServerOption  struct{}            // a kind this package does not know
	otherArg         struct{}
	funcOtherArg     struct{ f func(*otherArg) }
)

func (*funcServerOption) apply() {}

// TestChangedShapesAreErrors: every change of grpc-go's option layout that
// ServerCreds can meet is an ErrUnknownShape, never a wrong answer.
func TestChangedShapesAreErrors(t *testing.T) {
	old := grpcPkg
	grpcPkg = reflect.TypeFor[serverOptions]().PkgPath()
	t.Cleanup(func() { grpcPkg = old })

	set := &funcServerOption{f: func(o *serverOptions) { o.creds = 1 }}
	panics := &funcServerOption{f: func(*serverOptions) { panic("boom") }}
	tests := map[string][]reflect.Value{
		"creds field of another type": {reflect.ValueOf(set)},
		"join without a slice":        {reflect.ValueOf(&joinServerOption{})},
		"unknown option kind":         {reflect.ValueOf(&newServerOption{})},
		"option that panics":          {reflect.ValueOf(panics)},
		"two option structs":          {reflect.ValueOf(set), reflect.ValueOf(&funcOtherArg{f: func(*otherArg) {}})},
		"not a pointer":               {reflect.ValueOf(funcServerOption{})},
	}
	for name, opts := range tests {
		t.Run(name, func(t *testing.T) {
			var leaves []reflect.Value
			var err error
			for _, o := range opts {
				if leaves, err = flatten(leaves, o, 0); err != nil {
					break
				}
			}
			var s *settings
			if err == nil {
				s, err = applyLeaves(leaves)
			}
			if err == nil && s != nil {
				_, err = s.creds()
			}
			if !errors.Is(err, ErrUnknownShape) {
				t.Fatalf("got %v, want an ErrUnknownShape", err)
			}
		})
	}
}
