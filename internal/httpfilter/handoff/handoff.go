// Package handoff carries the filters users register through the public
// package httpfilter to the server's filter framework (internal/httpfilter)
// without either importing the other's registry. It imports nothing of this
// module, so both can import it.
package handoff

import "sync"

var (
	mu    sync.RWMutex
	users []any // adapters of registered filters, in registration order; guarded by mu
)

// Add records f, an adapter of a user's filter that implements the
// framework's Filter interface. A later filter takes over the types of an
// earlier one.
func Add(f any) {
	mu.Lock()
	defer mu.Unlock()
	users = append(users, f)
}

// Filters returns the filters added so far, the latest first.
func Filters() []any {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]any, len(users))
	for i, f := range users {
		out[len(users)-1-i] = f
	}
	return out
}
