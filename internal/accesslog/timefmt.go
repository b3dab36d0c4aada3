package accesslog

import (
	"crypto/x509"
	"fmt"
	"strconv"
	"time"
)

// timeFormat is a compiled time format of %START_TIME(FORMAT)% and its
// relatives: strftime's conversions in the C locale, abseil's extensions
// (%E#S, %E*S, %E#f, %E*f, %Ez, %E*z, %E4Y), which Envoy formats with, and
// Envoy's own %s (seconds since the epoch), %f and %1f to %9f (fractional
// seconds, 9 digits or the number given). Immutable.
type timeFormat struct {
	items []timeItem
}

// timeItem is literal text or one conversion.
type timeItem struct {
	lit  string
	conv byte // 0 for a literal
	ext  bool // %E... (abseil's extensions)
	n    int  // the digits of %Nf, %E#S, %E#f; -1 for '*'
}

// defaultLocalLayout is Envoy's default local time format,
// %Y-%m-%dT%H:%M:%E3S%z; in UTC it is %Y-%m-%dT%H:%M:%E3SZ
// (appendDefaultUTC).
const defaultLocalLayout = "2006-01-02T15:04:05.000-0700"

// strftimeConvs are the conversions of strftime supported (C locale).
const strftimeConvs = "aAbBcCdDeFgGhHIjklmMpPrRsStTuUVwWxXyYzZ%"

// parseTimeFormat compiles a time format. A newline (%n) is an error, as
// in Envoy (a formatted time may go into a header); so is a conversion not
// listed in timeFormat's doc, which Envoy would pass to the C library.
func parseTimeFormat(s string) (*timeFormat, error) {
	tf := &timeFormat{}
	lit := 0
	addLit := func(end int) {
		if end > lit {
			tf.items = append(tf.items, timeItem{lit: s[lit:end]})
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		addLit(i)
		item, n, err := parseConversion(s[i:])
		if err != nil {
			return nil, err
		}
		tf.items = append(tf.items, item)
		i += n - 1
		lit = i + 1
	}
	addLit(len(s))
	return tf, nil
}

// parseConversion reads the conversion at the start of s ('%') and
// returns it with its length.
func parseConversion(s string) (timeItem, int, error) {
	if len(s) < 2 {
		return timeItem{}, 0, fmt.Errorf("time format ends with '%%'")
	}
	c := s[1]
	switch {
	case c == 'n':
		return timeItem{}, 0, fmt.Errorf("time format contains a newline (%%n)")
	case c == 'f':
		return timeItem{conv: 'f', n: 9}, 2, nil
	case c >= '1' && c <= '9' && len(s) > 2 && s[2] == 'f':
		return timeItem{conv: 'f', n: int(c - '0')}, 3, nil
	case c == 'E':
		return parseExtension(s)
	case indexByte(strftimeConvs, c):
		return timeItem{conv: c}, 2, nil
	}
	return timeItem{}, 0, fmt.Errorf("unsupported time conversion %q", s[:2])
}

// parseExtension reads one of abseil's %E conversions at the start of s.
func parseExtension(s string) (timeItem, int, error) {
	rest := s[2:]
	switch {
	case len(rest) >= 1 && rest[0] == 'z':
		return timeItem{conv: 'z', ext: true, n: 0}, 3, nil
	case len(rest) >= 2 && rest[0] == '*' && rest[1] == 'z':
		return timeItem{conv: 'z', ext: true, n: -1}, 4, nil
	case len(rest) >= 2 && rest[0] == '4' && rest[1] == 'Y':
		return timeItem{conv: 'Y', ext: true}, 4, nil
	case len(rest) >= 2 && (rest[1] == 'S' || rest[1] == 'f') && (rest[0] == '*' || rest[0] >= '0' && rest[0] <= '9'):
		n := -1
		if rest[0] != '*' {
			n = int(rest[0] - '0')
		}
		return timeItem{conv: rest[1], ext: true, n: n}, 4, nil
	}
	end := min(len(s), 4)
	return timeItem{}, 0, fmt.Errorf("unsupported time conversion %q", s[:end])
}

func indexByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

var (
	shortDays   = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDays    = [...]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	shortMonths = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
	longMonths  = [...]string{"January", "February", "March", "April", "May", "June", "July", "August",
		"September", "October", "November", "December"}
)

// appendTime appends t formatted by f.
func (f *timeFormat) appendTime(b []byte, t time.Time) []byte {
	for _, it := range f.items {
		if it.conv == 0 {
			b = append(b, it.lit...)
			continue
		}
		b = appendConversion(b, t, it)
	}
	return b
}

// appendConversion appends one conversion of t.
func appendConversion(b []byte, t time.Time, it timeItem) []byte {
	switch {
	case it.ext:
		return appendExtension(b, t, it)
	case indexByte("aAbhBcCdDxeFgGjmuUVwWyY", it.conv):
		return appendDate(b, t, it.conv)
	}
	return appendClock(b, t, it)
}

// appendDate appends a conversion of t's date.
func appendDate(b []byte, t time.Time, conv byte) []byte {
	switch conv {
	case 'a':
		return append(b, shortDays[t.Weekday()]...)
	case 'A':
		return append(b, longDays[t.Weekday()]...)
	case 'b', 'h':
		return append(b, shortMonths[t.Month()-1]...)
	case 'B':
		return append(b, longMonths[t.Month()-1]...)
	case 'c':
		return t.AppendFormat(b, "Mon Jan _2 15:04:05 2006")
	case 'C':
		return appendInt(b, t.Year()/100, 2, '0')
	case 'd':
		return appendInt(b, t.Day(), 2, '0')
	case 'D', 'x':
		return t.AppendFormat(b, "01/02/06")
	case 'e':
		return appendInt(b, t.Day(), 2, ' ')
	case 'F':
		return t.AppendFormat(b, "2006-01-02")
	case 'g':
		y, _ := t.ISOWeek()
		return appendInt(b, y%100, 2, '0')
	case 'G':
		y, _ := t.ISOWeek()
		return appendInt(b, y, 4, '0')
	case 'j':
		return appendInt(b, t.YearDay(), 3, '0')
	case 'm':
		return appendInt(b, int(t.Month()), 2, '0')
	case 'u':
		return appendInt(b, (int(t.Weekday())+6)%7+1, 1, '0')
	case 'U':
		return appendInt(b, (t.YearDay()+6-int(t.Weekday()))/7, 2, '0')
	case 'V':
		_, w := t.ISOWeek()
		return appendInt(b, w, 2, '0')
	case 'w':
		return appendInt(b, int(t.Weekday()), 1, '0')
	case 'W':
		return appendInt(b, (t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2, '0')
	case 'y':
		return appendInt(b, t.Year()%100, 2, '0')
	}
	return strconv.AppendInt(b, int64(t.Year()), 10) // 'Y'
}

// appendClock appends a conversion of t's time of day, its zone, its
// seconds since the epoch or its fraction, or '%'.
func appendClock(b []byte, t time.Time, it timeItem) []byte {
	switch it.conv {
	case 'H':
		return appendInt(b, t.Hour(), 2, '0')
	case 'I':
		return appendInt(b, hour12(t), 2, '0')
	case 'k':
		return appendInt(b, t.Hour(), 2, ' ')
	case 'l':
		return appendInt(b, hour12(t), 2, ' ')
	case 'M':
		return appendInt(b, t.Minute(), 2, '0')
	case 'p':
		return t.AppendFormat(b, "PM")
	case 'P':
		return t.AppendFormat(b, "pm")
	case 'r':
		return t.AppendFormat(b, "03:04:05 PM")
	case 'R':
		return t.AppendFormat(b, "15:04")
	case 's':
		return strconv.AppendInt(b, t.Unix(), 10)
	case 'S':
		return appendInt(b, t.Second(), 2, '0')
	case 'f':
		return appendFraction(b, t, it.n)
	case 't':
		return append(b, '\t')
	case 'T', 'X':
		return t.AppendFormat(b, "15:04:05")
	case 'z':
		return t.AppendFormat(b, "-0700")
	case 'Z':
		return t.AppendFormat(b, "MST")
	}
	return append(b, '%') // '%'
}

// appendExtension appends one of abseil's %E conversions.
func appendExtension(b []byte, t time.Time, it timeItem) []byte {
	switch it.conv {
	case 'z':
		if it.n < 0 {
			return t.AppendFormat(b, "-07:00:00")
		}
		return t.AppendFormat(b, "-07:00")
	case 'Y':
		return appendInt(b, t.Year(), 4, '0')
	case 'S':
		b = appendInt(b, t.Second(), 2, '0')
		if it.n == 0 {
			return b
		}
		if it.n < 0 && t.Nanosecond() == 0 {
			return b
		}
		return appendFraction(append(b, '.'), t, it.n)
	}
	return appendFraction(b, t, it.n) // 'f'
}

// appendFraction appends the fractional seconds of t: n digits, or (n < 0)
// as many as it has, trailing zeros removed ("0" for none).
func appendFraction(b []byte, t time.Time, n int) []byte {
	var digits [9]byte
	ns := t.Nanosecond()
	for i := 8; i >= 0; i-- {
		digits[i] = byte('0' + ns%10)
		ns /= 10
	}
	if n < 0 {
		n = 9
		for n > 1 && digits[n-1] == '0' {
			n--
		}
	}
	return append(b, digits[:n]...)
}

func hour12(t time.Time) int {
	if h := t.Hour() % 12; h != 0 {
		return h
	}
	return 12
}

// appendInt appends v in width digits at least, padded with pad.
func appendInt(b []byte, v, width int, pad byte) []byte {
	if v < 0 {
		b = append(b, '-')
		v = -v
	}
	var digits [20]byte
	i := len(digits)
	for {
		i--
		digits[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	for n := len(digits) - i; n < width; n++ {
		b = append(b, pad)
	}
	return append(b, digits[i:]...)
}

// timeSource says which time a time operator reads.
type timeSource uint8

const (
	startTime timeSource = iota
	emitTime
	peerCertStart
	peerCertEnd
)

// timeOp prints a time: with its format, or Envoy's default (UTC, or the
// local zone for the _LOCAL operators).
type timeOp struct {
	src   timeSource
	local bool
	f     *timeFormat // nil: the default
}

func buildTime(src timeSource, local bool) func(*compiler, string, int) (operator, error) {
	return func(_ *compiler, params string, _ int) (operator, error) {
		op := timeOp{src: src, local: local}
		if params != "" {
			f, err := parseTimeFormat(params)
			if err != nil {
				return nil, err
			}
			op.f = f
		}
		return op, nil
	}
}

func (o timeOp) appendText(b []byte, r *Record) ([]byte, bool) {
	var t time.Time
	switch o.src {
	case startTime:
		t = r.StartTime
	case emitTime:
		if !r.StartTime.IsZero() {
			t = r.StartTime.Add(r.Duration)
		}
	case peerCertStart, peerCertEnd:
		c := peerLeaf(r)
		if c == nil {
			return b, false
		}
		t = certTime(c, o.src)
	}
	if t.IsZero() {
		return b, false
	}
	if o.local {
		t = t.Local()
	} else {
		t = t.UTC()
	}
	switch {
	case o.f != nil:
		return o.f.appendTime(b, t), true
	case o.local:
		return t.AppendFormat(b, defaultLocalLayout), true
	}
	return appendDefaultUTC(b, t), true
}

// appendDefaultUTC appends t (in UTC) in defaultUTCLayout, without
// parsing a layout: it is on every line of the default formats.
func appendDefaultUTC(b []byte, t time.Time) []byte {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	b = appendInt(b, y, 4, '0')
	b = appendInt(append(b, '-'), int(mo), 2, '0')
	b = appendInt(append(b, '-'), d, 2, '0')
	b = appendInt(append(b, 'T'), h, 2, '0')
	b = appendInt(append(b, ':'), mi, 2, '0')
	b = appendInt(append(b, ':'), s, 2, '0')
	b = appendInt(append(b, '.'), t.Nanosecond()/1e6, 3, '0')
	return append(b, 'Z')
}

func (timeOp) numeric() bool { return false }

func certTime(c *x509.Certificate, src timeSource) time.Time {
	if src == peerCertStart {
		return c.NotBefore
	}
	return c.NotAfter
}
