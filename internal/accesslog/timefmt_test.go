package accesslog_test

import (
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

// Week numbers and ISO years at the turn of a year, as C's strftime
// prints them.
func TestTimeFormatWeeks(t *testing.T) {
	l := compileOne(t, accesslogcfg.TextFormat("%START_TIME(%Y-%m-%d %a %U %W %V %G %g %u %w %j)%"), nil)
	for _, c := range []struct {
		date time.Time
		want string
	}{
		{time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC), "2021-01-01 Fri 00 00 53 2020 20 5 5 001"},
		{time.Date(2021, 1, 3, 0, 0, 0, 0, time.UTC), "2021-01-03 Sun 01 00 53 2020 20 7 0 003"},
		{time.Date(2021, 12, 31, 0, 0, 0, 0, time.UTC), "2021-12-31 Fri 52 52 52 2021 21 5 5 365"},
		{time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), "2024-01-01 Mon 00 01 01 2024 24 1 1 001"},
		{time.Date(2024, 12, 31, 0, 0, 0, 0, time.UTC), "2024-12-31 Tue 52 53 01 2025 25 2 2 366"},
		{time.Date(2027, 1, 3, 0, 0, 0, 0, time.UTC), "2027-01-03 Sun 01 00 53 2026 26 7 0 003"},
	} {
		if got := string(l.AppendLine(nil, &accesslog.Record{StartTime: c.date})); got != c.want {
			t.Errorf("%v: %q, want %q", c.date, got, c.want)
		}
	}
}

// A time format without conversions is printed as it is; an empty one is
// Envoy's default.
func TestTimeFormatLiteral(t *testing.T) {
	r := &accesslog.Record{StartTime: time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)}
	for format, want := range map[string]string{
		"%START_TIME(at noon)%":   "at noon",
		"%START_TIME()%":          "2026-01-02T03:04:05.006Z",
		"%START_TIME(%E0S|%E*S)%": "05|05.006",
		"%START_TIME(%E*f)%":      "006",
	} {
		if got := string(compileOne(t, accesslogcfg.TextFormat(format), nil).AppendLine(nil, r)); got != want {
			t.Errorf("%s = %q, want %q", format, got, want)
		}
	}
}
