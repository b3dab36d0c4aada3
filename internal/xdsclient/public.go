package xdsclient

// PoolOf returns the pool behind a public *xdsclient.Pool, and WrapPool
// makes a public *xdsclient.Pool of a pool: the public package sets both in
// its init, so that the server (PoolOf) and tests that need options the
// public package does not offer (WrapPool) can cross the boundary without
// the public package exporting this one's types.
var (
	PoolOf   func(public any) *Pool
	WrapPool func(*Pool) (public any)
)
