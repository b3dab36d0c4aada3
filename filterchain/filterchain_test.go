package filterchain_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestValidationError: an invalid Listener is a *ValidationError naming the
// chain and the field, as the server's NACK does.
func TestValidationError(t *testing.T) {
	l := listener()
	l.FilterChains[0].Filters = nil
	_, err := filterchain.Compile(l, filterchain.Options{})
	var ve *filterchain.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Compile: %v (%T), want a *ValidationError", err, err)
	}
	if !strings.Contains(ve.Chain, `"internal"`) || ve.Field == "" || ve.Err == nil || !strings.Contains(err.Error(), ve.Field) {
		t.Errorf("ValidationError %+v (%q): want the chain, the field and the reason", ve, err)
	}
}

// TestLookupAndChains: no match without a default chain is nil; Chains is
// a copy, the default last.
func TestLookupAndChains(t *testing.T) {
	l := listener()
	table, err := filterchain.Compile(l, filterchain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	chains := table.Chains()
	if len(chains) != 2 || chains[0].Name != "internal" || !chains[1].IsDefault || chains[1].TLS != nil {
		t.Fatalf("Chains() = %+v", chains)
	}
	chains[0] = nil
	if table.Chains()[0] == nil {
		t.Error("Chains() returned the table's own slice")
	}
	l.DefaultFilterChain = nil
	table, err = filterchain.Compile(l, filterchain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fc := table.Lookup(netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("10.0.0.1:8080")); fc != nil {
		t.Errorf("Lookup without a matching chain = %+v, want nil", fc)
	}
	var am *filterchain.AddressMismatchError
	if err := table.CheckAddress(netip.MustParseAddrPort("10.0.0.1:9090")); !errors.As(err, &am) || am.Listening.Port() != 9090 {
		t.Errorf("CheckAddress(other port) = %v, want an *AddressMismatchError", err)
	}
	if err := table.CheckAddress(netip.MustParseAddrPort("10.0.0.1:8080")); err != nil {
		t.Errorf("CheckAddress(own address) = %v", err)
	}
}
