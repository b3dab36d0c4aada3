package grpcservice

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
)

var logger = grpclog.Component("xds")

// The process's side channels, by target and credentials. A channel is
// made by the first Acquire of its key and closed by the release of the
// last one; in between, Conn finds it without a lock.
var (
	poolMu sync.Mutex
	pool   = map[string]*channel{} // guarded by poolMu
	live   sync.Map                // key → *channel, while acquired
)

// channel is one side channel. Its credentials are built, and its
// grpc.ClientConn made, on a goroutine of its own (build), never under
// poolMu nor on the caller's goroutine: credentials may be slow to build
// (google_default asks a metadata server; a type registered with grpc-go
// may do anything), and Acquire is called on a listener's serializer.
type channel struct {
	refs    int  // guarded by poolMu
	built   bool // guarded by poolMu; cc, err and cleanup are set
	dropped bool // guarded by poolMu; the last reference was released

	// ready is closed once built is set; cc, err and cleanup are read
	// after it.
	ready   chan struct{}
	cc      *grpc.ClientConn // nil when err is set
	err     error
	cleanup func() // nil when err is set
}

// ErrNoCredentials is Acquire's error for a Service parsed without an Env.
var ErrNoCredentials = errors.New("grpcservice: the GrpcService was validated without a bootstrap and has no credentials")

// Hold is Acquire for a filter that holds s while a filter chain serves
// (httpfilter.Acquirer): when s cannot be acquired, it logs why, naming
// filter, and returns a release that does nothing, so that the filter's
// calls fail (and its failure mode decides) until an update fixes it.
func (s *Service) Hold(filter string) (release func()) {
	release, err := s.Acquire()
	if err != nil {
		logger.Errorf("xds: %s: %v; the filter's calls to it fail until an update fixes it", filter, err)
		return func() {}
	}
	return release
}

// Acquire takes a reference to s's channel, making it if it is the first.
// It never blocks: the credentials are built and the channel made (by
// grpc.NewClient, which does not connect) on a goroutine of their own, and
// Conn waits for them. The returned release drops the reference; the last
// one closes the channel and releases its credentials (once they are
// built, if they are still being built).
func (s *Service) Acquire() (release func(), err error) {
	if s.creds == nil {
		return nil, ErrNoCredentials
	}
	poolMu.Lock()
	ch := pool[s.key]
	if ch == nil {
		ch = &channel{ready: make(chan struct{})}
		pool[s.key] = ch
		live.Store(s.key, ch)
		go s.build(ch)
	}
	ch.refs++
	poolMu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { s.release(ch) }) }, nil
}

// build builds ch's credentials and makes its connection. A failed build
// leaves the pool, so that the next Acquire (a configuration update) tries
// again; until then, Conn reports the error to the holders of ch.
func (s *Service) build(ch *channel) {
	opts, cleanup, err := s.creds.dialOptions()
	var cc *grpc.ClientConn
	if err == nil {
		if cc, err = grpc.NewClient(s.Target, opts...); err != nil {
			cleanup()
			cleanup = nil
		}
	}
	if err != nil {
		err = fmt.Errorf("side channel to %q: %w", s.Target, err)
		logger.Errorf("xds: %v", err)
	}
	poolMu.Lock()
	ch.cc, ch.err, ch.cleanup, ch.built = cc, err, cleanup, true
	if err != nil && pool[s.key] == ch {
		delete(pool, s.key)
	}
	dropped := ch.dropped
	poolMu.Unlock()
	close(ch.ready)
	switch {
	case dropped:
		ch.close()
	case err == nil:
		logger.Infof("xds: side channel to %q opened (credentials: %s)", s.Target, s.CredsSource)
	}
}

func (s *Service) release(ch *channel) {
	poolMu.Lock()
	ch.refs--
	last := ch.refs == 0
	if last {
		if pool[s.key] == ch {
			delete(pool, s.key)
		}
		live.CompareAndDelete(s.key, ch)
		ch.dropped = true
	}
	built := ch.built
	poolMu.Unlock()
	if last && built && ch.close() {
		logger.Infof("xds: side channel to %q closed (no filter chain uses it)", s.Target)
	}
}

// close closes a built channel that nothing holds any more, and reports
// whether there was a connection to close (its build did not fail).
func (ch *channel) close() bool {
	if ch.cc == nil {
		return false
	}
	ch.cc.Close()
	ch.cleanup()
	return true
}

// Conn returns s's channel, waiting until ctx ends for its credentials to
// be built. It fails when no filter chain holds the channel (it was never
// acquired, or is closed), when its credentials could not be built, or
// when ctx ends first. It takes no lock.
func (s *Service) Conn(ctx context.Context) (*grpc.ClientConn, error) {
	v, ok := live.Load(s.key)
	if !ok {
		return nil, fmt.Errorf("no side channel to %q (no filter chain holds it)", s.Target)
	}
	ch := v.(*channel)
	select {
	case <-ch.ready:
	default:
		select {
		case <-ch.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("side channel to %q: its credentials are still being built: %w", s.Target, ctx.Err())
		}
	}
	if ch.err != nil {
		return nil, ch.err
	}
	return ch.cc, nil
}

// OpenChannels returns how many side channels are open or being made, for
// tests.
func OpenChannels() int {
	poolMu.Lock()
	defer poolMu.Unlock()
	return len(pool)
}
