#!/usr/bin/env bash
# The field evaluation behind EVALUATION.md: deadlinevet, contextcheck and noctx
# over six public codebases brought through the Go module proxy, and over this
# project, in one run. Raw findings land in $OUT/<codebase>.<tool>.txt.
#   deadlinevet/field/run.sh [OUT]      (default /tmp/deadlinevet-field)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-/tmp/deadlinevet-field}
mkdir -p "$OUT/src"
export PATH="$(go env GOPATH)/bin:$PATH"
# go vet caches a tool's result when it exits 0, which a tool printing -json
# does, and replays nothing: a build cache of the run's own makes every tool run.
export GOCACHE=$OUT/gocache
rm -rf "$GOCACHE"

(cd "$here" && go build -o "$OUT/deadlinevet" ./cmd/deadlinevet)
go install github.com/kkHAIKE/contextcheck/cmd/contextcheck@v1.1.6
go install github.com/sonatard/noctx/cmd/noctx@v0.5.1

modules=(
  grpc-examples=google.golang.org/grpc/examples@v0.0.0-20260825154716-030ee8becb20
  connect=connectrpc.com/connect@v1.21.1
  grpc-gateway=github.com/grpc-ecosystem/grpc-gateway/v2@v2.33.0
  oauth2-proxy=github.com/oauth2-proxy/oauth2-proxy/v7@v7.15.6
  kratos=github.com/go-kratos/kratos/v2@v2.8.3
  go-kit=github.com/go-kit/kit@v0.13.0
)
for m in "${modules[@]}"; do
  name=${m%%=*} mod=${m#*=}
  dir=$(go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$OUT/src/$name" ] && continue
  cp -r "$dir" "$OUT/src/$name" && chmod -R u+w "$OUT/src/$name"
  # grpc's examples replace grpc with ../ (their repository); use the released module.
  (cd "$OUT/src/$name" && for r in $(go mod edit -json | sed -n 's/.*"Old": {"Path": "\([^"]*\)".*/\1/p;/"Old": {/{n;s/.*"Path": "\([^"]*\)".*/\1/p}'); do go mod edit -dropreplace "$r"; done && go mod tidy >/dev/null 2>&1)
done
ln -sfn "$(cd "$here/.." && pwd)" "$OUT/src/deadlinekit"

# Every tool under go vet -json, the same command for each (noctx runs only under
# go vet), turned into one line per finding by vetjson.py.
for name in ${CODEBASES:-grpc-examples connect grpc-gateway oauth2-proxy kratos go-kit deadlinekit}; do
  for tool in ${TOOLS:-deadlinevet contextcheck noctx}; do
    bin=$(command -v $tool) flags=()
    [ $tool = deadlinevet ] && bin=$OUT/deadlinevet flags=(-newroot -sleep) # every check on
    (cd "$OUT/src/$name" && go vet -vettool="$bin" "${flags[@]}" -json ./... 2>&1 | python3 "$here/field/vetjson.py" > "$OUT/$name.$tool.txt")
    echo "$name $tool $(wc -l < "$OUT/$name.$tool.txt")"
  done
done
