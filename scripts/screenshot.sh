#!/usr/bin/env bash
# Screenshots trace pages of the Jaeger UI with headless Chromium, as a user sees
# them: for each "trace <ID>  <label>" line on standard input (what
# examples/threehop prints with -otlp), the page http://127.0.0.1:16686/trace/<ID>
# into OUTDIR/<label>.png. Jaeger must be running with its UI (scripts/jaeger.sh
# start, with the UI assets present).
#
#   go run ./examples/threehop -otlp 127.0.0.1:4317 | tee /dev/stderr | scripts/screenshot.sh /tmp/shots
#
# CHROMIUM (default: chromium) is the browser, JAEGER_UI (default
# http://127.0.0.1:16686) the UI's address, SHOT_SIZE (default 1600,1200) the window.
set -euo pipefail
out="${1:?usage: $0 OUTDIR < lines \"trace <ID>  <label>\"}"
browser="${CHROMIUM:-chromium}"
ui="${JAEGER_UI:-http://127.0.0.1:16686}"
size="${SHOT_SIZE:-1600,1200}"
mkdir -p "$out"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT

n=0
while read -r word id label; do
  [ "$word" = trace ] && [ -n "$id" ] || continue
  name=$(printf '%s' "${label:-$id}" | tr -cs 'A-Za-z0-9' '-' | sed 's/^-*//; s/-*$//')
  file="$out/$name.png"
  # The UI is a JavaScript application: the virtual time budget lets it fetch the
  # trace and render before the shot is taken.
  "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --window-size="$size" --virtual-time-budget=10000 \
    --screenshot="$file" "$ui/trace/$id" >/dev/null 2>&1
  echo "$file  $ui/trace/$id"
  n=$((n + 1))
done
if [ "$n" = 0 ]; then echo "screenshot.sh: no \"trace <ID>  <label>\" line on standard input" >&2; exit 1; fi
