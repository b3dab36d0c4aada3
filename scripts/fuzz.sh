#!/usr/bin/env bash
# Runs every fuzz target of the module for a given time each (default 10m),
# one after the other, and prints a summary line per target. A crash leaves
# its input under the package's testdata/fuzz/<Target>/, where `go test`
# then replays it as a regression seed: commit it with the fix.
#
#   scripts/fuzz.sh            # 10 minutes per target
#   scripts/fuzz.sh 30s        # a quick pass
#   scripts/fuzz.sh 10m rbac   # only targets in packages matching "rbac"
#   FUZZFLAGS=-parallel=1 scripts/fuzz.sh 2m   # one fuzzing worker
#   FUZZ_SAVE=1 scripts/fuzz.sh 10m            # also keep the new corpus
#
# The fuzzer keeps the inputs that reached new code in its cache
# ($GOCACHE/fuzz), which a fresh machine does not have. Each target's
# testdata/fuzz/<Target>/ holds the corpus of earlier runs, so a run starts
# from the coverage they reached, and `go test` replays every one of those
# inputs as a regression test. FUZZ_SAVE=1 copies the inputs this run added
# to the cache into testdata/fuzz, to be committed.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10m}
filter=${2:-}
module=$(go list -m)
cache=$(go env GOCACHE)/fuzz
status=0
# Every "func FuzzX(" in a _test.go file, as "package-dir FuzzX".
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s#^func #$(dirname "$f") #"
done)
while read -r dir target; do
  [ -z "$dir" ] && continue
  case "$dir" in *"$filter"*) ;; *) continue ;; esac
  log=$(mktemp)
  if go test -run "^$" -fuzz "^${target}\$" -fuzztime "$fuzztime" ${FUZZFLAGS:-} "$dir" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1)
  saved=
  if [ "$result" = ok ] && [ -n "${FUZZ_SAVE:-}" ]; then
    from="$cache/$module/${dir#./}/$target"
    to="$dir/testdata/fuzz/$target"
    mkdir -p "$to"
    before=$(ls "$to" | wc -l)
    [ -d "$from" ] && cp -n "$from"/* "$to"/ 2>/dev/null
    saved=", corpus +$(( $(ls "$to" | wc -l) - before )) in $to"
  fi
  echo "$result $dir $target ($fuzztime, ${execs:-execs: ?}$saved)"
  [ "$result" = ok ] || tail -20 "$log"
  rm -f "$log"
done <<<"$targets"
exit $status
