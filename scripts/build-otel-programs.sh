#!/usr/bin/env bash
# Build the trace programs `make e2e` runs, from their Go modules:
#
#   * Jaeger v2 (module github.com/jaegertracing/jaeger v1.75.0 = Jaeger 2.12),
#     from the scratch module collector-config/jaeger-build/;
#   * the OpenTelemetry Collector, built by the OpenTelemetry Collector Builder
#     v0.165.0 from collector-config/otelcol-builder.yaml.
#
#   scripts/build-otel-programs.sh      prints the two binaries' paths
#
# Everything built or downloaded lives outside the repository, in
# ${LOOPSCRIBE_E2E_CACHE:-${XDG_CACHE_HOME:-~/.cache}/loopscribe-e2e}: the Go
# module and build caches and the binaries, named by version (the collector
# by a hash of its manifest), so a second run builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

JAEGER_MODULE_VERSION=v1.75.0
BUILDER_VERSION=v0.165.0
CACHE="${LOOPSCRIBE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loopscribe-e2e}"
BIN="$CACHE/bin"

GET_GO="install Go 1.25 or later from https://go.dev/dl/ (make e2e builds Jaeger and the OpenTelemetry Collector with it) and run make e2e again"
if ! command -v go >/dev/null 2>&1; then
  echo "build-otel-programs: 'go' is not on PATH; $GET_GO" >&2
  exit 1
fi
go_version=$(go env GOVERSION)
if [[ ! "$go_version" =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 25)); then
  echo "build-otel-programs: $(command -v go) is $go_version; $GET_GO" >&2
  exit 1
fi

export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOPATH="$CACHE/go/path"
export GOBIN="$BIN"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:-} -trimpath"
export CGO_ENABLED=0
mkdir -p "$BIN" "$GOMODCACHE" "$GOCACHE"
# Shared machines: the compilers yield to everybody else.
NICE=(nice -n 10)

jaeger="$BIN/jaeger-$JAEGER_MODULE_VERSION"
manifest_hash=$(sha256sum collector-config/otelcol-builder.yaml | cut -c1-12)
collector="$BIN/otelcol-loopscribe-$manifest_hash"

if [[ ! -x "$jaeger" ]]; then
  start=$SECONDS
  echo "build-otel-programs: building Jaeger ($JAEGER_MODULE_VERSION) into $BIN ..." >&2
  (cd collector-config/jaeger-build &&
    "${NICE[@]}" go build -o "$jaeger.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$jaeger.tmp" "$jaeger"
  echo "build-otel-programs: Jaeger built in $((SECONDS - start))s" >&2
fi

if [[ ! -x "$collector" ]]; then
  start=$SECONDS
  builder="$BIN/builder-$BUILDER_VERSION"
  if [[ ! -x "$builder" ]]; then
    echo "build-otel-programs: installing the Collector Builder $BUILDER_VERSION ..." >&2
    "${NICE[@]}" go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
    mv "$BIN/builder" "$builder"
  fi
  echo "build-otel-programs: building the Collector from collector-config/otelcol-builder.yaml ..." >&2
  work="$CACHE/collector-src/$manifest_hash"
  mkdir -p "$work"
  (cd "$work" && "${NICE[@]}" "$builder" --config="$ROOT/collector-config/otelcol-builder.yaml")
  cp "$work/otelcol-loopscribe/otelcol-loopscribe" "$collector.tmp"
  mv "$collector.tmp" "$collector"
  echo "build-otel-programs: Collector built in $((SECONDS - start))s" >&2
fi

echo "$jaeger"
echo "$collector"
