#!/usr/bin/env bash
# Project-specific checks that go vet does not do. Each prints the offending
# lines; any finding makes the script fail.
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
report() { # $1 = what is wrong, $2 = the offending lines (may be empty)
  if [ -n "$2" ]; then
    echo "vet.sh: $1"; echo "$2"; fail=1
  fi
}
gofiles=$(git ls-files '*.go')
nontest=$(echo "$gofiles" | grep -v '_test\.go$' | grep -v '^examples/' || true)
envoy='"github.com/(envoyproxy/go-control-plane/envoy|cncf/xds/go)/'

# time.After keeps its timer until it fires; use time.NewTimer and Stop.
report "time.After in non-test code (use time.NewTimer + Stop)" \
  "$(grep -n 'time\.After(' $nontest /dev/null)"
# Addresses are netip values.
report "net.ParseIP (use netip.ParseAddr)" "$(grep -n 'net\.ParseIP(' $gofiles /dev/null)"
# Envoy and xDS proto packages are imported with a ...pb alias (blank imports aside).
report "envoy/xds proto import without a ...pb alias" \
  "$(grep -nE "^\s*$envoy" $gofiles /dev/null)"
report "envoy/xds proto alias does not end in pb" \
  "$(grep -nE "^\s*[A-Za-z0-9]+\s+$envoy" $gofiles /dev/null | grep -vE '^[^:]+:[0-9]+:\s*[A-Za-z0-9_]*pb\s')"
# Only tests import the test helpers.
report "non-test code imports internal/testutils" \
  "$(grep -ln '"github.com/proxyless-grpc/xds/internal/testutils' $nontest /dev/null | grep -v '^internal/testutils/')"
exit $fail
