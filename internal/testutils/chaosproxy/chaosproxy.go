// Package chaosproxy is a fault injector for tests: a TCP proxy on loopback
// that a test puts between two real parts (an xDS server and its management
// server) to stand in for the network faults that no real part can produce on
// demand: a cut link, a black hole, a connection reset in the middle of a
// response. Only tests import it.
//
// The proxy forwards bytes unchanged, in both directions, over one upstream
// connection per accepted connection. When either side of a pair ends, both
// are closed (half-closes are not forwarded; gRPC does not use them).
package chaosproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the dial of an upstream connection (on loopback a dial
// succeeds or is refused at once).
const dialTimeout = 5 * time.Second

// Proxy is a TCP proxy from a loopback address to a target address. Its
// methods are safe for concurrent use; after Close they do nothing.
type Proxy struct {
	target string        // immutable
	lis    net.Listener  // immutable
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool               // guarded by mu
	cut    bool               // guarded by mu; new connections are refused
	open   chan struct{}      // guarded by mu; closed while bytes may flow
	conns  map[*conn]struct{} // guarded by mu
	armed  bool               // guarded by mu; ResetMidResponse is pending
	resets int                // guarded by mu
}

// conn is one accepted connection and its upstream connection.
type conn struct {
	client net.Conn
	done   chan struct{} // closed when the pair is closed

	once sync.Once
	mu   sync.Mutex
	up   net.Conn // guarded by mu; nil until dialed
}

// New starts a proxy listening on 127.0.0.1:0 that forwards to target
// (host:port). The caller must Close it.
func New(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{
		target: target,
		lis:    lis,
		done:   make(chan struct{}),
		open:   open,
		conns:  make(map[*conn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address the proxy listens on (host:port).
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Cut closes (resets) every connection and refuses new ones until Restore:
// they are accepted and reset at once, before a byte is read or written. A
// Cut replaces a BlackHole; a BlackHole after a Cut accepts new connections
// into the black hole (a dropped link whose reconnection then hangs).
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.cut = true
	p.closeGateLocked()
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
}

// BlackHole makes the proxy accept connections but forward nothing, in
// either direction, on new and existing connections, until Restore: a peer
// sees a live TCP connection that never answers. The bytes are held, not
// dropped (at most one read per direction and connection, the rest stays in
// the kernel's buffers), and flow on Restore; new connections are dialed
// upstream only then. It ends a Cut's refusal of new connections.
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.cut = false
	p.closeGateLocked()
}

// ResetMidResponse arms a one-shot fault: the next read from an upstream
// connection is written to its client only in part (the first half of the
// bytes read, fewer than all of them), then that connection pair is reset.
// Other connections are not affected. Resets counts the faults injected.
func (p *Proxy) ResetMidResponse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.armed = true
	}
}

// Resets returns how many connections ResetMidResponse has reset so far.
func (p *Proxy) Resets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resets
}

// Restore ends a Cut or a BlackHole: new connections are forwarded again and
// black-holed bytes flow. It does not disarm ResetMidResponse.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.cut = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops the proxy: the listener and every connection are closed, and
// Close returns once every goroutine of the proxy has exited. Calling it
// again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	err := p.lis.Close()
	for _, c := range conns {
		c.close(true)
	}
	p.wg.Wait()
	return err
}

// closeGateLocked stops the flow of bytes (if it flows).
func (p *Proxy) closeGateLocked() {
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

func (p *Proxy) takeConnsLocked() []*conn {
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	clear(p.conns)
	return conns
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.lis.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		c := &conn{client: nc, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed || p.cut {
			p.mu.Unlock()
			c.close(true)
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.run(c)
	}
}

// run dials the upstream connection of c once bytes may flow, then forwards
// in both directions until either side ends.
func (p *Proxy) run(c *conn) {
	defer p.wg.Done()
	defer p.forget(c)
	if !p.waitOpen(c) {
		c.close(true)
		return
	}
	up, err := p.dial(c)
	if err != nil {
		c.close(true)
		return
	}
	if !c.setUp(up) {
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, up, c.client, true) }()
	go func() { defer wg.Done(); p.pipe(c, c.client, up, false) }()
	wg.Wait()
}

// dial dials the target for c; closing c or the proxy abandons the dial.
func (p *Proxy) dial(c *conn) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-c.done:
		case <-p.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	defer wg.Wait()
	defer cancel()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.target)
}

func (p *Proxy) forget(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// waitOpen waits until bytes may flow; false if c or the proxy was closed
// first.
func (p *Proxy) waitOpen(c *conn) bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		// Closed or cut while open is the old gate: do not forward.
		select {
		case <-c.done:
			return false
		default:
			return true
		}
	case <-c.done:
		return false
	case <-p.done:
		return false
	}
}

// takeReset reports whether a ResetMidResponse is pending, and consumes it.
func (p *Proxy) takeReset() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.closed {
		return false
	}
	p.armed = false
	p.resets++
	return true
}

// pipe copies src to dst until either fails; then it closes the pair.
// toClient says that dst is the accepted connection.
func (p *Proxy) pipe(c *conn, src, dst net.Conn, toClient bool) {
	defer c.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitOpen(c) {
				return
			}
			if toClient && p.takeReset() {
				dst.Write(buf[:n/2])
				c.close(true)
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setUp records the upstream connection; false if c was closed already.
func (c *conn) setUp(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return false
	default:
	}
	c.up = up
	return true
}

// close closes both connections of the pair, with a TCP reset if reset is
// set (as a failed network would), else with a FIN.
func (c *conn) close(reset bool) {
	c.once.Do(func() {
		c.mu.Lock()
		close(c.done)
		up := c.up
		c.mu.Unlock()
		for _, nc := range []net.Conn{c.client, up} {
			if nc == nil {
				continue
			}
			if tc, ok := nc.(*net.TCPConn); ok && reset {
				tc.SetLinger(0)
			}
			nc.Close()
		}
	})
}
