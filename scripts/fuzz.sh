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
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10m}
filter=${2:-}
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
  echo "$result $dir $target ($fuzztime, ${execs:-execs: ?})"
  [ "$result" = ok ] || tail -20 "$log"
  rm -f "$log"
done <<<"$targets"
exit $status
