package httpfilter

import (
	"reflect"
	"runtime"
	"sync"
	"weak"
)

// State is where filter state that must survive configuration updates
// lives (gRFC A83's "blackboard"): the server keeps one per xDS Listener and
// gives it to the filters that build steps with state (StatefulFilter)
// whenever it builds the routes of one of that Listener's filter chains, for
// a Listener update or an RDS update alike. The zero value is ready. Safe
// for concurrent use; used on the configuration path only, never per RPC.
type State struct {
	mu sync.Mutex
	m  map[retainKey]any // weak.Pointer[T] by key; guarded by mu
}

// processState is the State of Retain with a nil State.
var processState State

// StatefulFilter is implemented by filters whose steps keep state that
// must survive configuration updates (token buckets): the server calls
// BuildStatefulStep, with the State of the Listener whose routes it builds,
// instead of BuildStep. The step finds its state with Retain.
type StatefulFilter interface {
	Filter
	BuildStatefulStep(state *State, instance string, config, override Config) (Step, error)
}

// Retain returns the value of type T kept in s under key, building it with
// build when there is none; a nil s means one State for the whole process.
// A filter calls it when it builds a step, with a key naming the state's
// owner: typically its instance name and the part of its config the state
// depends on. Every step built with the same key in s (for any filter chain
// of the Listener) gets the same value, so an update that leaves the key
// unchanged keeps the state, and one that changes it starts from a new
// value.
//
// A value is kept for as long as something holds it (in practice, the
// steps of a configuration still in use, including by connections being
// drained); after that it is dropped when the garbage collector finds it
// unreachable, so a key that comes back later may or may not find its old
// value. Values of different types never collide. build runs with s's lock
// held: it must be quick and must not call Retain.
func Retain[T any](s *State, key string, build func() *T) *T {
	if s == nil {
		s = &processState
	}
	k := retainKey{typ: reflect.TypeFor[T](), key: key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if wp, ok := s.m[k].(weak.Pointer[T]); ok {
		if v := wp.Value(); v != nil {
			return v
		}
	}
	v := build()
	wp := weak.Make(v)
	if s.m == nil {
		s.m = make(map[retainKey]any)
	}
	s.m[k] = wp
	runtime.AddCleanup(v, dropRetained, retainedEntry{state: s, key: k, wp: wp})
	return v
}

type retainKey struct {
	typ reflect.Type
	key string
}

type retainedEntry struct {
	state *State
	key   retainKey
	wp    any // the weak.Pointer[T] stored for key
}

// dropRetained forgets a collected value, unless its key was taken over
// since.
func dropRetained(e retainedEntry) {
	e.state.mu.Lock()
	defer e.state.mu.Unlock()
	if e.state.m[e.key] == e.wp {
		delete(e.state.m, e.key)
	}
}

// len returns the number of keys s holds, for tests.
func (s *State) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
