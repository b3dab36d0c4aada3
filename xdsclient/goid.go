package xdsclient

import (
	"runtime"
	"strconv"
	"strings"
)

// goroutineID returns the ID of the calling goroutine, read from the header
// line of its stack trace ("goroutine 42 [running]:").
//
// The client needs it for one thing: telling whether a cancel (or Close, or
// Dump) is called from inside a watcher callback, that is on the serializer
// goroutine, where waiting for the callback to return would deadlock. It is
// called once per client at creation and once per such call, never on a hot
// path.
func goroutineID() uint64 {
	var buf [64]byte
	s := string(buf[:runtime.Stack(buf[:], false)])
	s = strings.TrimPrefix(s, "goroutine ")
	if i := strings.IndexByte(s, ' '); i > 0 {
		s = s[:i]
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// The format has been stable since Go 1.0; 0 never matches a real
		// goroutine, so callers then behave as if called from outside.
		return 0
	}
	return id
}
