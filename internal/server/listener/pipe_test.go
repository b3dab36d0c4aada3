package listener

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// pipeListener is a net.Listener with no socket: dial hands Accept the
// server's end of a net.Pipe. Both ends carry TCP addresses (the listener's,
// and a new client port per dial on clientIP), since the listener serves
// only TCP connections and its filter chains match those addresses.
//
// Every server end is kept, in accept order, so that a test can tell which
// connections the listener closed; events gets a token each time a server
// end is first read (the listener hands a connection to gRPC only after
// adding it to its chain server) or closed, so that a test can wait for a
// connection count to change without polling.
type pipeListener struct {
	addr     *net.TCPAddr // immutable
	clientIP net.IP       // immutable
	conns    chan *pipeConn
	done     chan struct{} // closed by Close
	once     sync.Once
	port     atomic.Int32 // the last client port handed out
	events   chan struct{}

	mu       sync.Mutex
	accepted []*pipeConn // guarded by mu
}

func newPipeListener(addr *net.TCPAddr, clientIP net.IP) *pipeListener {
	p := &pipeListener{addr: addr, clientIP: clientIP, conns: make(chan *pipeConn), done: make(chan struct{}), events: make(chan struct{}, 1)}
	p.port.Store(40000)
	return p
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		p.mu.Lock()
		p.accepted = append(p.accepted, c)
		p.mu.Unlock()
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (p *pipeListener) Addr() net.Addr { return p.addr }

// dial connects to the listener: it returns the client's end once Accept
// has taken the server's.
func (p *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	src := &net.TCPAddr{IP: p.clientIP, Port: int(p.port.Add(1))}
	sc := &pipeConn{Conn: server, local: p.addr, remote: src, closed: make(chan struct{}), events: p.events}
	select {
	case p.conns <- sc:
		return &pipeConn{Conn: client, local: src, remote: p.addr, closed: make(chan struct{})}, nil
	case <-p.done:
		err := &net.OpError{Op: "dial", Net: "pipe", Addr: p.addr, Err: net.ErrClosed}
		client.Close()
		server.Close()
		return nil, err
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// conn returns the server end of the i-th accepted connection (from 0).
func (p *pipeListener) conn(i int) *pipeConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted[i]
}

// numAccepted returns the number of accepted connections.
func (p *pipeListener) numAccepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.accepted)
}

// pipeConn is one end of a net.Pipe with TCP addresses.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
	closed        chan struct{} // closed by the first Close
	closeOnce     sync.Once
	readOnce      sync.Once
	events        chan struct{} // nil on the client's end
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }

func (c *pipeConn) Read(b []byte) (int, error) {
	c.readOnce.Do(c.notify)
	return c.Conn.Read(b)
}

func (c *pipeConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		close(c.closed)
		c.notify()
	})
	return err
}

func (c *pipeConn) notify() {
	if c.events == nil {
		return
	}
	select {
	case c.events <- struct{}{}:
	default: // a token is already pending
	}
}

// isClosed reports whether c was closed.
func (c *pipeConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}
