#!/usr/bin/env bash
# Builds Jaeger (v1.76.0, pinned in tools/jaeger/go.mod) once per machine and, with
# "start", runs it on loopback with scripts/jaeger.yaml: OTLP on 127.0.0.1:4317 (gRPC)
# and :4318 (HTTP), the query API and UI on :16686, traces in memory. A cold build
# takes about 10 minutes on 2 cores; the binary is kept in $JAEGER_CACHE (default
# ~/.cache/deadlinekit) so that every checkout on the machine, CI's fresh clones
# included, reuses it.
#
# The Go module builds the query API but not the web UI (a separate JavaScript
# build): the UI comes from a folder of built jaeger-ui assets, $JAEGER_UI_ASSETS,
# by default ../shared/jaeger-ui beside the repository. Without it Jaeger serves a
# placeholder page on :16686; the query API, which the end-to-end test reads, works.
#
#   scripts/jaeger.sh build        build the binary into $JAEGER_CACHE if it is missing
#   scripts/jaeger.sh start        build if needed, start in the background, wait until ready
#   scripts/jaeger.sh stop         stop the instance started by "start"
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache="${JAEGER_CACHE:-$HOME/.cache/deadlinekit}"
bin="$cache/jaeger-v1.76.0"
config="$top/scripts/jaeger.yaml"
pidfile="$top/.bin/jaeger.pid"
logfile="$top/.bin/jaeger.log"
mkdir -p "$top/.bin"

build() {
  if [ -x "$bin" ]; then return 0; fi
  mkdir -p "$cache"
  echo "jaeger.sh: building Jaeger v1.76.0 into $cache (about 10 minutes cold)" >&2
  (cd "$top/tools/jaeger" && go build -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$bin.tmp" "$bin"
}

ready() { curl -fsS -o /dev/null "http://127.0.0.1:16686/api/services" 2>/dev/null; }

# ui_assets prints the absolute path of the UI assets folder, or nothing (and says
# so on stderr) when there is none.
ui_assets() {
  local dir="${JAEGER_UI_ASSETS:-$top/../shared/jaeger-ui}"
  if [ -f "$dir/index.html" ]; then
    (cd "$dir" && pwd)
  else
    echo "jaeger.sh: no Jaeger UI assets in $dir (set JAEGER_UI_ASSETS to a built jaeger-ui folder):" \
      "the query API works, http://127.0.0.1:16686 shows only a placeholder page" >&2
  fi
}

start() {
  build
  if ready; then echo "jaeger.sh: a Jaeger already answers on 127.0.0.1:16686" >&2; return 0; fi
  local ui
  ui=$(ui_assets)
  JAEGER_UI_ASSETS="$ui" nohup "$bin" --config "$config" >"$logfile" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if ready; then
      echo "jaeger.sh: Jaeger ready (pid $(cat "$pidfile"), log $logfile)${ui:+, UI from $ui}" >&2
      return 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "jaeger.sh: Jaeger exited; last log lines:" >&2
      tail -20 "$logfile" >&2
      rm -f "$pidfile"
      return 1
    fi
    sleep 0.5
  done
  echo "jaeger.sh: Jaeger did not become ready in 60 s; last log lines:" >&2
  tail -20 "$logfile" >&2
  return 1
}

stop() {
  if [ ! -f "$pidfile" ]; then return 0; fi
  local pid
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  # Wait for it to let go of its ports, so that a "start" right after works.
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  rm -f "$pidfile"
}

case "${1:-start}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 [build|start|stop]" >&2; exit 2 ;;
esac
