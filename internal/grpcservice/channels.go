package grpcservice

import (
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
	live   sync.Map                // key → *grpc.ClientConn, while acquired
)

type channel struct {
	refs    int // guarded by poolMu
	cc      *grpc.ClientConn
	cleanup func()
}

// ErrNoCredentials is Acquire's error for a Service parsed without an Env.
var ErrNoCredentials = errors.New("grpcservice: the GrpcService was validated without a bootstrap and has no credentials")

// Acquire takes a reference to s's channel, making it if it is the first
// (grpc.NewClient does not connect: the first call does). The returned
// release drops the reference; the last one closes the channel and
// releases its credentials. It never blocks on the network.
func (s *Service) Acquire() (release func(), err error) {
	if s.creds == nil {
		return nil, ErrNoCredentials
	}
	poolMu.Lock()
	defer poolMu.Unlock()
	ch := pool[s.key]
	if ch == nil {
		opts, cleanup, err := s.creds.dialOptions()
		if err != nil {
			return nil, fmt.Errorf("side channel to %q: %w", s.Target, err)
		}
		cc, err := grpc.NewClient(s.Target, opts...)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("side channel to %q: %w", s.Target, err)
		}
		ch = &channel{cc: cc, cleanup: cleanup}
		pool[s.key] = ch
		live.Store(s.key, cc)
		logger.Infof("xds: side channel to %q opened (credentials: %s)", s.Target, s.CredsSource)
	}
	ch.refs++
	var once sync.Once
	return func() { once.Do(func() { s.release(ch) }) }, nil
}

func (s *Service) release(ch *channel) {
	poolMu.Lock()
	ch.refs--
	last := ch.refs == 0
	if last {
		delete(pool, s.key)
		live.Delete(s.key)
	}
	poolMu.Unlock()
	if last {
		ch.cc.Close()
		ch.cleanup()
		logger.Infof("xds: side channel to %q closed (no filter chain uses it)", s.Target)
	}
}

// Conn returns s's channel; false when no filter chain holds it (it was
// never acquired, or is closed). It takes no lock.
func (s *Service) Conn() (*grpc.ClientConn, bool) {
	v, ok := live.Load(s.key)
	if !ok {
		return nil, false
	}
	return v.(*grpc.ClientConn), true
}

// OpenChannels returns how many side channels are open, for tests.
func OpenChannels() int {
	poolMu.Lock()
	defer poolMu.Unlock()
	return len(pool)
}
