package connserver

import (
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"

	"google.golang.org/grpc/mem"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/netaddr"
)

// conn is the net.Conn an xDS server hands to gRPC for one accepted
// connection (inside a Conn). It carries the filter chain that serves the
// connection, reports its first Close to the server, and keeps gRPC's
// pooled-buffer reads:
// grpc-go reads an idle connection without pinning a read buffer only if the
// net.Conn is a raw *net.TCPConn or has a ReadOnReady method, so a plain
// wrapper would cost every idle connection a 32 KiB buffer.
//
// conn deliberately does not implement syscall.Conn: code that reads the raw
// socket of a wrapped connection could bypass a TLS layer put on top of it.
//
// Methods other than ReadOnReady are safe for concurrent use, as net.Conn's
// are. ReadOnReady must not run concurrently with itself.
type conn struct {
	net.Conn // the accepted connection; conn owns it

	// Immutable after newConn.
	chain    *filterchain.FilterChain
	src, dst netip.AddrPort
	onClose  func() // nil if the caller wants no notification

	closeOnce sync.Once // runs onClose

	// Set up by the first ReadOnReady and then only touched by ReadOnReady,
	// which runs one call at a time.
	readerReady bool
	raw         syscall.RawConn       // nil: fall back to blocking reads
	inner       readOnReadyer         // set when Conn has its own ReadOnReady
	readFn      func(fd uintptr) bool // c.readFd, bound once so calls do not allocate
	rs          readState             // request and result of one readFn run
}

// readOnReadyer is the optional interface grpc-go (1.85) looks for on a
// net.Conn to read it without pinning a buffer while it is idle
// (google.golang.org/grpc/internal/transport/readyreader.Reader).
type readOnReadyer interface {
	ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error)
}

var _ readOnReadyer = (*conn)(nil)

// readState passes one ReadOnReady request to conn.readFd and carries the
// result back. It lives in conn so that a read allocates nothing.
type readState struct {
	bufSize int
	pool    mem.BufferPool

	buf *[]byte // taken from pool; nil unless n > 0
	n   int
	err error // from read(2); never EAGAIN
}

// newConn wraps c, an accepted connection from src (the peer) to dst (the
// local address), served by chain. conn takes ownership of c. onClose, if not
// nil, is called exactly once, by the first Close, before c is closed; a
// concurrent Close waits for it. src and dst are stored with IPv4-mapped IPv6
// addresses unmapped.
func newConn(c net.Conn, chain *filterchain.FilterChain, src, dst netip.AddrPort, onClose func()) *conn {
	return &conn{
		Conn:    c,
		chain:   chain,
		src:     netaddr.Unmap(src),
		dst:     netaddr.Unmap(dst),
		onClose: onClose,
	}
}

// FilterChain returns the filter chain that serves the connection.
func (c *conn) FilterChain() *filterchain.FilterChain { return c.chain }

// Source returns the peer's address, with an IPv4-mapped IPv6 address
// unmapped.
func (c *conn) Source() netip.AddrPort { return c.src }

// Destination returns the local address the peer connected to, with an
// IPv4-mapped IPv6 address unmapped.
func (c *conn) Destination() netip.AddrPort { return c.dst }

// Close calls onClose if this is the first Close, then closes the underlying
// connection. Every call closes the underlying connection, so later calls
// report its error for a second close (net.ErrClosed for a *net.TCPConn). A
// pending ReadOnReady returns an error.
func (c *conn) Close() error {
	if c.onClose != nil {
		c.closeOnce.Do(c.onClose)
	}
	return c.Conn.Close()
}

// ReadOnReady waits until the connection is readable, then takes a buffer of
// bufSize (which must be positive) from pool and reads into it, so that an
// idle connection holds no buffer. It returns the buffer, which the caller
// must put back into pool, and the number of bytes read; a nil buffer means
// nothing was read. As with io.Reader, the caller handles n > 0 bytes before
// the error. A closed peer yields io.EOF; the read deadline set with
// SetReadDeadline or SetDeadline applies.
//
// On a *net.TCPConn the read is a non-blocking read(2) of the socket through
// syscall.RawConn, which waits in Go's poller without a buffer; it does not
// allocate. Other connections, and all on Windows, are read with a blocking
// Read into a pooled buffer, unless they have a ReadOnReady method, which is
// then used.
//
// ReadOnReady must not be called concurrently with itself; Close and the
// other methods may run concurrently with it.
func (c *conn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	if !c.readerReady {
		c.setUpReader()
	}
	switch {
	case c.raw != nil:
		return c.readRaw(bufSize, pool)
	case c.inner != nil:
		return c.inner.ReadOnReady(bufSize, pool)
	default:
		return c.readBlocking(bufSize, pool)
	}
}

// setUpReader picks how ReadOnReady reads. It is done on the first read
// rather than in newConn because a connection that gets TLS on top is never
// read through ReadOnReady. Only called from ReadOnReady.
func (c *conn) setUpReader() {
	c.readerReady = true
	switch uc := c.Conn.(type) {
	case *net.TCPConn:
		if runtime.GOOS == "windows" {
			// syscall.Read is ReadFile there, not a non-blocking recv.
			return
		}
		raw, err := uc.SyscallConn()
		if err != nil {
			return // blocking fallback; Read reports the problem
		}
		c.raw = raw
		c.readFn = c.readFd
	case readOnReadyer:
		c.inner = uc
	}
}

// readRaw reads with a non-blocking read(2) when the poller reports the
// socket readable. Only called from ReadOnReady.
func (c *conn) readRaw(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	c.rs = readState{bufSize: bufSize, pool: pool}
	err := c.raw.Read(c.readFn)
	rs := c.rs
	c.rs = readState{} // drop the references to pool and buf
	if err != nil {
		// Closed, deadline exceeded: RawConn.Read did not run readFn to
		// completion, or ran it once and then failed; rs.buf is nil in either
		// case because readFd keeps a buffer only when it returns true.
		if rs.buf != nil {
			pool.Put(rs.buf)
		}
		return nil, 0, err
	}
	if rs.err != nil {
		return nil, 0, c.readError(rs.err)
	}
	if rs.n == 0 {
		// read(2) returns 0 once the peer has shut down its side.
		pool.Put(rs.buf)
		return nil, 0, io.EOF
	}
	return rs.buf, rs.n, nil
}

// readFd is the RawConn.Read callback: it reads fd once with a pooled buffer
// and returns false, asking to wait for readability, if the socket had no
// data. A buffer is kept in c.rs only when something was read or the peer
// closed; on EAGAIN it goes back to the pool before waiting.
func (c *conn) readFd(fd uintptr) bool {
	rs := &c.rs
	buf := rs.pool.Get(rs.bufSize)
	var n int
	var err error
	for {
		n, err = sysRead(syscall.Read, fd, *buf)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		rs.pool.Put(buf)
		if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
			return false
		}
		rs.err = err
		return true
	}
	rs.buf, rs.n = buf, n
	return true
}

// sysRead calls read, which is syscall.Read, with fd converted to the
// descriptor type read takes on this platform (int on Unix, syscall.Handle on
// Windows), so that this file compiles everywhere without build tags.
func sysRead[FD ~int | ~uintptr](read func(FD, []byte) (int, error), fd uintptr, p []byte) (int, error) {
	return read(FD(fd), p)
}

// readError turns an errno from read(2) into the error a *net.TCPConn's Read
// would return for it, so callers that inspect read errors see no difference.
func (c *conn) readError(errno error) error {
	return &net.OpError{
		Op:     "read",
		Net:    "tcp",
		Source: c.Conn.LocalAddr(),
		Addr:   c.Conn.RemoteAddr(),
		Err:    os.NewSyscallError("read", errno),
	}
}

// readBlocking is ReadOnReady for connections that cannot be polled: it holds
// a pooled buffer while Read blocks. Only called from ReadOnReady.
func (c *conn) readBlocking(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	buf := pool.Get(bufSize)
	n, err := c.Conn.Read(*buf)
	if n == 0 {
		pool.Put(buf)
		if err == nil {
			// An empty read without an error is allowed but says nothing;
			// report it as such rather than as EOF.
			return nil, 0, nil
		}
		return nil, 0, err
	}
	return buf, n, err
}

// AddrPortOf returns the address and port of a, which must be a *net.TCPAddr
// with a valid IP, with an IPv4-mapped IPv6 address unmapped. It reports
// false for any other net.Addr.
func AddrPortOf(a net.Addr) (netip.AddrPort, bool) {
	if _, ok := a.(*net.TCPAddr); !ok {
		return netip.AddrPort{}, false
	}
	return netaddr.FromNet(a)
}
