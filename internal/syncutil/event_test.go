package syncutil

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestEvent(t *testing.T) {
	testutils.CheckGoroutines(t)
	e := NewEvent()
	if e.HasFired() {
		t.Fatal("HasFired() = true on a new event")
	}
	select {
	case <-e.Done():
		t.Fatal("Done closed on a new event")
	default:
	}
	if !e.Fire() {
		t.Fatal("first Fire() = false, want true")
	}
	if !e.HasFired() {
		t.Error("HasFired() = false after Fire")
	}
	select {
	case <-e.Done():
	default:
		t.Error("Done not closed after Fire")
	}
	if e.Fire() {
		t.Error("second Fire() = true, want false")
	}
}

func TestEvent_ConcurrentFireHasOneWinner(t *testing.T) {
	testutils.CheckGoroutines(t)
	e := NewEvent()
	var winners atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.Fire() {
				winners.Add(1)
			}
			if !e.HasFired() {
				t.Error("HasFired() = false after Fire returned")
			}
		}()
	}
	wg.Wait()
	if got := winners.Load(); got != 1 {
		t.Errorf("%d calls of Fire returned true, want 1", got)
	}
}
