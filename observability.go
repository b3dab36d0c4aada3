package xds

import (
	"net/netip"
	"sync"
	"time"
)

// drainCount is the number of connections a configuration change drains:
// the live connections of the retired chainServers and the rerouted
// connections of the kept ones. Called with lw.connMu held, before the
// change is published, so that no connection joins or leaves a drain in
// between.
func drainCount(retired []*chainServer, rerouted map[*chainServer][]*trackedConn) int {
	n := 0
	for _, cs := range retired {
		n += cs.liveConns()
	}
	for _, conns := range rerouted {
		n += len(conns)
	}
	return n
}

// noteDrain logs and counts a drain of n connections that has started, once
// per configuration change; nothing when n is 0. Only called on the
// serializer.
func (lw *listenerWrapper) noteDrain(why string, n int) {
	if n == 0 {
		return
	}
	lw.metrics.DrainStarted()
	lw.log.Infof("draining %d connection(s) (%s): GOAWAY, then closed after at most %v", n, why, lw.opts.drainGrace)
}

// liveConns counts the connections of cs that are not draining yet.
func (cs *chainServer) liveConns() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for c := range cs.conns {
		if !c.draining {
			n++
		}
	}
	return n
}

// handshakeLogInterval is how often, at most, handshake failures of one
// filter chain are logged at warning level.
const handshakeLogInterval = time.Minute

// handshakeLog limits the logging of failed handshakes (TLS, mTLS) of a
// listener: a client with a bad certificate retries forever, and one line
// per attempt would drown the log. The first failure of each filter chain is
// logged at once; later ones at most once per handshakeLogInterval, with the
// number of failures left out since. Every failure is logged at info level
// (verbosity 2). The zero value is ready to use; it is safe for concurrent
// use.
type handshakeLog struct {
	mu     sync.Mutex
	chains map[string]*handshakeLogState // guarded by mu; by filter chain name
}

type handshakeLogState struct {
	last       time.Time // when the last warning was logged
	suppressed int       // failures not logged at warning level since
}

// handshakeFailed logs a failed handshake of a connection from src on the
// filter chain named chain. Connection handlers (credentials) call it once
// per failed handshake, never per RPC:
//
//	lw.handshakeFailed(chain.Name, src, err)
func (lw *listenerWrapper) handshakeFailed(chain string, src netip.AddrPort, err error) {
	now := time.Now()
	h := &lw.hsLog
	h.mu.Lock()
	if h.chains == nil {
		h.chains = make(map[string]*handshakeLogState)
	}
	st := h.chains[chain]
	if st == nil {
		st = &handshakeLogState{}
		h.chains[chain] = st
	}
	warn := st.last.IsZero() || now.Sub(st.last) >= handshakeLogInterval
	suppressed := st.suppressed
	if warn {
		st.last, st.suppressed = now, 0
	} else {
		st.suppressed++
	}
	h.mu.Unlock()

	if !warn {
		if logger.V(2) {
			lw.log.Infof("filter chain %q: TLS handshake with %v failed: %v", chain, src, err)
		}
		return
	}
	if suppressed > 0 {
		lw.log.Warningf("filter chain %q: TLS handshake with %v failed: %v (%d more failure(s) since the last warning, logged at verbosity 2)", chain, src, err, suppressed)
		return
	}
	lw.log.Warningf("filter chain %q: TLS handshake with %v failed: %v", chain, src, err)
}
