package httpfilter

import "testing"

// TestConnStateBounded: a connection that sees many keys keeps the newest.
func TestConnStateBounded(t *testing.T) {
	var c ConnState
	keys := make([]*int, 2*maxConnEntries)
	for i := range keys {
		keys[i] = new(int)
		c.GetOrInit(keys[i], func() any { return i })
	}
	if got := len(*c.entries.Load()); got != maxConnEntries {
		t.Errorf("%d entries, want %d", got, maxConnEntries)
	}
	if v := c.Get(keys[len(keys)-1]); v != len(keys)-1 {
		t.Errorf("newest key = %v, want %d", v, len(keys)-1)
	}
	if v := c.Get(keys[0]); v != nil {
		t.Errorf("oldest key = %v, want it forgotten", v)
	}
}
