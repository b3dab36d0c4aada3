package httpfilter

import (
	"fmt"
	"math/rand/v2"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Fraction is a share of RPCs, from an Envoy FractionalPercent: Hit draws
// whether one RPC is in it. The zero value is 0%. Immutable.
type Fraction struct {
	num, den uint64 // num <= den; den > 0 unless the zero value
}

// FractionAll is 100%.
var FractionAll = Fraction{num: 1, den: 1}

// ParseFraction converts a FractionalPercent (Envoy: a numerator above
// the denominator means 100%): the one parser of FractionalPercent in the
// module (filters, route runtime fractions, the status page). A nil fp is
// def. An unknown denominator is an error naming field (none when field
// is empty).
func ParseFraction(field string, fp *typepb.FractionalPercent, def Fraction) (Fraction, error) {
	if fp == nil {
		return def, nil
	}
	var den uint64
	switch fp.GetDenominator() {
	case typepb.FractionalPercent_HUNDRED:
		den = 100
	case typepb.FractionalPercent_TEN_THOUSAND:
		den = 10_000
	case typepb.FractionalPercent_MILLION:
		den = 1_000_000
	default:
		path := "denominator"
		if field != "" {
			path = field + "." + path
		}
		return Fraction{}, fmt.Errorf("%s: unknown value %d, want HUNDRED, TEN_THOUSAND or MILLION", path, int32(fp.GetDenominator()))
	}
	return Fraction{num: min(uint64(fp.GetNumerator()), den), den: den}, nil
}

// ParseRuntimeFraction reads the default value of an Envoy
// RuntimeFractionalPercent (there is no runtime): a nil rf is def, one
// without default_value an error naming field.
func ParseRuntimeFraction(field string, rf *corepb.RuntimeFractionalPercent, def Fraction) (Fraction, error) {
	if rf == nil {
		return def, nil
	}
	if rf.GetDefaultValue() == nil {
		return Fraction{}, fmt.Errorf("%s.default_value: missing", field)
	}
	return ParseFraction(field+".default_value", rf.GetDefaultValue(), def)
}

// Numerator returns the fraction's numerator over Denominator.
func (f Fraction) Numerator() uint64 { return f.num }

// Denominator returns the fraction's denominator (0 for the zero value).
func (f Fraction) Denominator() uint64 { return f.den }

// Capped returns the fraction with its numerator lowered to num if it is
// above it (the percentage headers of fault injection can only lower the
// configured percentage).
func (f Fraction) Capped(num uint64) Fraction {
	if num < f.num {
		f.num = num
	}
	return f
}

// Always reports whether the fraction is 100%; Never whether it is 0%.
func (f Fraction) Always() bool { return f.den != 0 && f.num == f.den }
func (f Fraction) Never() bool  { return f.num == 0 }

// Hit draws whether one RPC falls in the fraction: with probability
// num/den, each call independent. It takes no lock and allocates nothing
// (no draw at all at 0% or 100%).
func (f Fraction) Hit() bool {
	switch {
	case f.num == 0:
		return false
	case f.num == f.den:
		return true
	}
	return rand.Uint64N(f.den) < f.num
}

// String returns the fraction as "num/den".
func (f Fraction) String() string { return fmt.Sprintf("%d/%d", f.num, f.den) }

// GRPCCodeOfHTTP maps an HTTP status to the gRPC status code a client
// infers from it when a response carries no grpc-status (gRPC's "HTTP to
// gRPC status code mapping"): 400 INTERNAL, 401 UNAUTHENTICATED, 403
// PERMISSION_DENIED, 404 UNIMPLEMENTED, 429, 502, 503 and 504 UNAVAILABLE,
// anything else UNKNOWN. The result is a gRPC code number (this package does
// not import gRPC).
func GRPCCodeOfHTTP(httpStatus int) uint32 {
	const (
		unknown          = 2
		permissionDenied = 7
		unimplemented    = 12
		internal         = 13
		unavailable      = 14
		unauthenticated  = 16
	)
	switch httpStatus {
	case 400:
		return internal
	case 401:
		return unauthenticated
	case 403:
		return permissionDenied
	case 404:
		return unimplemented
	case 429, 502, 503, 504:
		return unavailable
	}
	return unknown
}
