#!/usr/bin/env bash
# Runs connect-go's conformance suite (connectrpc.com/conformance, the version
# conformance/go.mod requires) against the reference client and server with the
# deadlinekit stack added, on the narrow configuration of conformance/config.yaml.
#
#   scripts/conformance.sh build          fetch the module, patch and build into .bin/conformance
#   scripts/conformance.sh run MODE VARIANT [runner flags...]
#                                         MODE: client or server; VARIANT: off, default or nodefault
#   scripts/conformance.sh ci             build, then every check CI makes (see ci below)
#
# The reference implementations live in internal packages, so they are built from a
# copy of the module with conformance/stack.patch applied: it appends the options of
# package github.com/deadlinekit/deadlinekit/conformance (chosen by DEADLINEKIT_STACK)
# to those the reference server and client build. The runner itself is built
# unpatched, so the reference peer it runs in-process is always bare.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin/conformance
conf=$root/conformance

build() {
  (cd "$conf" && go mod download)
  local src
  src=$(cd "$conf" && go list -m -f '{{.Dir}}' connectrpc.com/conformance)
  rm -rf "$bin/src"
  mkdir -p "$bin"
  cp -R "$src" "$bin/src"
  chmod -R u+w "$bin/src"
  patch -s -p1 -d "$bin/src" <"$conf/stack.patch"
  (
    cd "$bin/src"
    go mod edit \
      -require=github.com/deadlinekit/deadlinekit/conformance@v0.0.0 \
      -replace=github.com/deadlinekit/deadlinekit/conformance="$conf" \
      -replace=github.com/deadlinekit/deadlinekit="$root"
    sort -u go.sum "$conf/go.sum" "$root/go.sum" -o go.sum
    go build -mod=mod -o "$bin/referenceserver" ./cmd/referenceserver
    go build -mod=mod -o "$bin/referenceclient" ./cmd/referenceclient
  )
  (cd "$conf" && go build -o "$bin/connectconformance" connectrpc.com/conformance/cmd/connectconformance)
}

# run MODE VARIANT [flags]: the suite against the patched reference MODE under VARIANT.
run() {
  local mode=${1:-} variant=${2:-}
  case "$mode" in client | server) ;; *) echo "MODE $mode: want client or server" >&2; return 2 ;; esac
  shift 2
  if [ ! -x "$bin/reference$mode" ]; then echo "no $bin/reference$mode: run $0 build first" >&2; return 2; fi
  "$bin/connectconformance" --mode "$mode" --conf "$conf/config.yaml" "$@" -- \
    env DEADLINEKIT_STACK="$variant" "$bin/reference$mode"
}

# check MODE VARIANT [flags]: run, noting a failure in failed instead of stopping.
# The bare reference (VARIANT off: no deadlinekit code in it) is run once more when
# it fails: it checks the suite itself, whose HTTP/1 gRPC-Web bidi case once failed
# there alone ("invalid Read on closed Body"); a second failure is the suite's.
check() {
  printf -- '-- %s\n' "$*"
  if run "$@"; then return 0; fi
  if [ "${2:-}" = off ]; then
    printf -- '-- %s (again: the bare reference failed once)\n' "$*"
    run "$@" && return 0
  fi
  failed+=("$*")
}

# ci: the checks .ci/run makes. The bare reference must pass every case in both
# modes (else the suite, not the stack, is broken here); with the stack, the client
# must pass every case, and the server every case with no default budget and every
# case but the unary ones of conformance/known-failing-server-default.txt (which must
# fail) with the defaults. Every run is made and its count printed before the verdict.
ci() {
  build
  failed=()
  check server off
  check client off
  check server default --known-failing "@$conf/known-failing-server-default.txt"
  check server nodefault
  check client default
  if [ ${#failed[@]} -gt 0 ]; then
    printf 'conformance failed: %s\n' "${failed[@]}"
    return 1
  fi
}

case "${1:-}" in
build) build ;;
run) shift; run "$@" ;;
ci) ci ;;
*) echo "usage: $0 build | run MODE VARIANT [flags] | ci" >&2; exit 2 ;;
esac
