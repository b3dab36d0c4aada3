// memListener was the server's in-memory listener before each connection got
// its own grpc.Server; it remains as the test harness that feeds wrapped
// connections to one grpc.Server (conn tests, BenchmarkIdleConnHeap).

package xds

import (
	"errors"
	"net"
	"sync"
)

// errListenerClosed is returned by memListener.push after Close.
var errListenerClosed = errors.New("xds: listener closed")

// memListener is a net.Listener whose connections are handed to it with push
// instead of coming from a socket: each filter chain's grpc.Server serves one.
//
// All methods are safe for concurrent use. memListener starts no goroutines.
type memListener struct {
	addr net.Addr // immutable

	// ready holds a token while conns may be non-empty, so that a waiting
	// Accept wakes up. Accept passes the token on when it leaves connections
	// behind, so several waiting Accepts are all served.
	ready  chan struct{}
	closed chan struct{} // closed by Close

	mu sync.Mutex
	// conns[head:] are pushed and not yet accepted, oldest first; the array
	// is reused so a steady trickle of connections does not allocate.
	conns    []net.Conn // guarded by mu
	head     int        // guarded by mu
	isClosed bool       // guarded by mu
}

// maxIdleQueueCap is the largest queue array an empty memListener keeps for
// reuse; a bigger one, left by a burst, is dropped once drained.
const maxIdleQueueCap = 64

// newMemListener returns an open memListener whose Addr is addr.
func newMemListener(addr net.Addr) *memListener {
	return &memListener{
		addr:   addr,
		ready:  make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
}

// push queues c for Accept; it never blocks (the queue is unbounded). On
// success the listener owns c until Accept returns it. After Close it returns
// errListenerClosed and does not take c, which the caller must then close.
func (l *memListener) push(c net.Conn) error {
	l.mu.Lock()
	if l.isClosed {
		l.mu.Unlock()
		return errListenerClosed
	}
	if l.head > 0 && len(l.conns) == cap(l.conns) {
		// Reuse the accepted prefix instead of growing the array.
		n := copy(l.conns, l.conns[l.head:])
		clear(l.conns[n:])
		l.conns, l.head = l.conns[:n], 0
	}
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	l.signal()
	return nil
}

// signal leaves a token in ready unless one is there already.
func (l *memListener) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Accept returns the oldest pushed connection, waiting for one if none is
// queued. After Close it returns an error for which errors.Is(err,
// net.ErrClosed) holds, which grpc.Server.Serve treats as the end of serving.
// Connections are returned in push order.
func (l *memListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.isClosed {
			l.mu.Unlock()
			return nil, l.closedError()
		}
		if l.head < len(l.conns) {
			c := l.conns[l.head]
			l.conns[l.head] = nil // the array must not keep c reachable
			l.head++
			more := l.head < len(l.conns)
			if !more {
				l.head = 0
				if cap(l.conns) > maxIdleQueueCap {
					l.conns = nil
				} else {
					l.conns = l.conns[:0]
				}
			}
			l.mu.Unlock()
			if more {
				l.signal()
			}
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.closed:
		}
	}
}

// closedError is what Accept returns after Close: the error a closed
// net.TCPListener returns, so callers need not tell the two apart.
func (l *memListener) closedError() error {
	e := &net.OpError{Op: "accept", Addr: l.addr, Err: net.ErrClosed}
	if l.addr != nil {
		e.Net = l.addr.Network()
	}
	return e
}

// Close stops the listener: waiting and later Accepts return an error, later
// pushes fail, and connections that were pushed but not accepted are closed
// (after the listener's lock is released, as closing a conn calls its
// onClose). Close is idempotent and always returns nil.
func (l *memListener) Close() error {
	l.mu.Lock()
	if l.isClosed {
		l.mu.Unlock()
		return nil
	}
	l.isClosed = true
	queued := l.conns[l.head:]
	l.conns, l.head = nil, 0
	close(l.closed)
	l.mu.Unlock()

	for _, c := range queued {
		c.Close()
	}
	return nil
}

// Addr returns the address given to newMemListener.
func (l *memListener) Addr() net.Addr { return l.addr }
