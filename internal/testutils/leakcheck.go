// Package testutils holds helpers shared by this module's tests. Only _test.go
// files import it.
package testutils

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs the package's tests and then fails the run if any
// goroutine started by them is still alive. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m, ignores()...)
}

// ignores lists the goroutines a leak check does not report.
func ignores() []goleak.Option {
	return []goleak.Option{
		// Started once per process by grpc-go and never stopped.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/resolver/dns.init"),
	}
}
