#!/usr/bin/env bash
# go vet ./... against go vet -vettool=deadlinevet ./... (every check on) over this
# project, the same command shape, interleaved, N runs each; prints each run and
# the medians. go vet caches a clean result, keyed by the tool's flags, so each
# run spells its flags anew to make the vet step run again (go vet: a function
# name that exists nowhere added to -printf.funcs; deadlinevet: "true" written
# as one of 1, t, T, TRUE, true, True for each check); the compiled packages it
# reads stay cached for both alike.
#   deadlinevet/field/timing.sh [N]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-7}
bin=$(mktemp -d)/deadlinevet
(cd "$here" && go build -o "$bin" ./cmd/deadlinevet)
cd "$here/.."
go vet ./... && go vet -vettool="$bin" -newroot -sleep ./... # warm the build cache
now() { date +%s.%N; }
vet=() dv=()
for i in $(seq 1 "$N"); do
  spell=(1 t T TRUE true True) n=$((RANDOM * 32768 + RANDOM)) flags=()
  for check in newroot detached noctx retryloop sleep; do flags+=("-$check=${spell[n % 6]}"); n=$((n / 6)); done
  t0=$(now); go vet -printf.funcs="bust$RANDOM$RANDOM" ./...; t1=$(now)
  go vet -vettool="$bin" "${flags[@]}" ./...; t2=$(now)
  vet+=("$(echo "$t1 - $t0" | bc)") dv+=("$(echo "$t2 - $t1" | bc)")
  echo "run $i: go vet ${vet[-1]} s, deadlinevet ${dv[-1]} s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mv=$(median "${vet[@]}") md=$(median "${dv[@]}")
echo "median: go vet $mv s, deadlinevet $md s, ratio $(echo "scale=2; $md / $mv" | bc)"
