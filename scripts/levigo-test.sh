#!/usr/bin/env bash
# A client of LevelDB's C API that nobody here wrote: Go's levigo (github.com/jmhodges/levigo
# v1.0.0, from the Go module proxy) built with cgo against libwisckey_c (installed as
# libleveldb.so through scripts/install-capi.sh --leveldb-symlink), running its own `go test`.
# usage: scripts/levigo-test.sh
#   CAPI_PREFIX=DIR: use an install made with the symlink instead of building one;
#   CAPI_LIB_DIR=DIR: install the libraries in DIR (e.g. target/debug/deps after `cargo test`)
#   into a temporary prefix instead of building release ones;
#   LEVIGO_TMPDIR=DIR: where the tests put their databases (levigo's TestC makes 20,000 synced
#   writes: about 40 s on this machine's disk, a fraction of a second on tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || { echo "levigo-test: Go is not installed" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="${CAPI_PREFIX:-}"
if [ -z "$prefix" ]; then
  prefix="$work/prefix"
  scripts/install-capi.sh "$prefix" --leveldb-symlink ${CAPI_LIB_DIR:+--lib-dir "$CAPI_LIB_DIR"} >&2
fi
[ -e "$prefix/lib/libleveldb.so" ] || { echo "$prefix/lib/libleveldb.so missing: install with --leveldb-symlink" >&2; exit 1; }
mkdir "$work/mod"
cd "$work/mod"
go mod init levigo-on-wisckey >/dev/null 2>&1
GOFLAGS=-mod=mod go get github.com/jmhodges/levigo@v1.0.0 >&2
export CGO_ENABLED=1 CGO_CFLAGS="-I$prefix/include" CGO_LDFLAGS="-L$prefix/lib -Wl,-rpath,$prefix/lib"
# Make sure the test binary links our library, not a LevelDB installed elsewhere.
go test -c -o "$work/levigo.test" github.com/jmhodges/levigo
ldd "$work/levigo.test" | grep -E 'libleveldb' | grep -q "$prefix/lib" \
  || { echo "levigo.test does not link $prefix/lib/libleveldb.so:" >&2; ldd "$work/levigo.test" >&2; exit 1; }
readlink -f "$prefix/lib/libleveldb.so" | grep -q libwisckey_c || { echo "libleveldb.so is not libwisckey_c" >&2; exit 1; }
cd "$work"
TMPDIR="${LEVIGO_TMPDIR:-$work}" ./levigo.test -test.v -test.count=1
