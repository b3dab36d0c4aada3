//go:build !unix

package filterchain_test

import "time"

// processCPUTime is unavailable here.
func processCPUTime() (time.Duration, bool) { return 0, false }
