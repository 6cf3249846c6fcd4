#!/usr/bin/env bash
# Builds Jaeger (v1.76.0, pinned in tools/jaeger/go.mod) once per machine and, with
# "start", runs it on loopback: OTLP on 127.0.0.1:4317 (gRPC) and :4318 (HTTP), the
# query API and UI on :16686. A cold build takes about 10 minutes on 2 cores; the
# binary is kept in $JAEGER_CACHE (default ~/.cache/deadlinekit) so that every
# checkout on the machine, CI's fresh clones included, reuses it.
#
#   scripts/jaeger.sh build        build .bin/jaeger if it is missing
#   scripts/jaeger.sh start        build if needed, start in the background, wait until ready
#   scripts/jaeger.sh stop         stop the instance started by "start"
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache="${JAEGER_CACHE:-$HOME/.cache/deadlinekit}"
bin="$cache/jaeger-v1.76.0"
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

start() {
  build
  if ready; then echo "jaeger.sh: a Jaeger already answers on 127.0.0.1:16686" >&2; return 0; fi
  # Jaeger v2 reads its collector settings from a config file; the built-in
  # all-in-one default (memory storage, OTLP receivers, query on 16686) is used
  # when none is given.
  nohup "$bin" >"$logfile" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if ready; then echo "jaeger.sh: Jaeger ready (pid $(cat "$pidfile"), log $logfile)" >&2; return 0; fi
    sleep 0.5
  done
  echo "jaeger.sh: Jaeger did not become ready in 60 s; last log lines:" >&2
  tail -20 "$logfile" >&2
  return 1
}

stop() {
  if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
}

case "${1:-start}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 [build|start|stop]" >&2; exit 2 ;;
esac
