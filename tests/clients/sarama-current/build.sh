#!/bin/sh
# Builds ../sarama/main.go against the current Sarama (github.com/IBM/sarama,
# the version in go.mod here) instead of Debian's github.com/Shopify/sarama
# 1.22.1: go.mod, go.sum and current.go are copied into a fresh build
# directory with main.go, whose one sarama import line is rewritten to
# github.com/IBM/sarama, and `go build` runs there. No cgo (zstd is
# klauspost/compress, pure Go). Needs Go >= 1.26.0 (Sarama 1.61's go.mod).
#
#   build.sh download   fill the module cache (go mod download; network)
#   build.sh OUT        build the client binary OUT (offline once downloaded:
#                       GOPROXY=off works)
#
# The module and build caches default to .peers/go/{mod,cache} of the
# repository (git-ignored), never $HOME; GOMODCACHE / GOCACHE override them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
GOMODCACHE=${GOMODCACHE:-$root/.peers/go/mod}
GOCACHE=${GOCACHE:-$root/.peers/go/cache}
GOFLAGS="-modcacherw${GOFLAGS:+ $GOFLAGS}"
GO111MODULE=on
CGO_ENABLED=0
export GOMODCACHE GOCACHE GOFLAGS GO111MODULE CGO_ENABLED

if [ $# -ne 1 ]; then
    echo "usage: $0 download | $0 OUT" >&2
    exit 2
fi
if [ "$1" = download ]; then
    cd "$here"
    exec go mod download
fi
case $1 in
    /*) out=$1 ;;
    *) out=$PWD/$1 ;;
esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/sarama-current.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cp "$here/go.mod" "$here/go.sum" "$here/current.go" "$dir/"
sed 's#^\([[:space:]]*\)"github.com/Shopify/sarama"$#\1"github.com/IBM/sarama"#' \
    "$root/tests/clients/sarama/main.go" > "$dir/main.go"
if ! grep -q '^[[:space:]]*"github.com/IBM/sarama"$' "$dir/main.go"; then
    echo "$0: no github.com/Shopify/sarama import line in main.go" >&2
    exit 1
fi
cd "$dir"
go build -trimpath -o "$out" .
