#!/usr/bin/env bash
# Builds LevelDB's C API over wisckey (capi/, release profile) and installs it under PREFIX:
#   PREFIX/lib/libwisckey_c.so, libwisckey_c.a, PREFIX/lib/pkgconfig/wisckey_c.pc,
#   PREFIX/include/leveldb/c.h and export.h (LevelDB's BSD-licensed header, LICENSE beside it).
# Then `cc prog.c -I PREFIX/include -L PREFIX/lib -lwisckey_c` (or `pkg-config --cflags --libs
# wisckey_c`) builds a program written for LevelDB's C API.
# With --leveldb-symlink it also installs libleveldb.so (and .a) as symlinks, for programs and
# bindings that link `-lleveldb` (Go's levigo, ...); do not use it beside a real LevelDB.
# With --lib-dir DIR it installs the libraries found in DIR instead of building them (CI takes
# the ones `cargo test` built, in target/debug/deps).
# usage: scripts/install-capi.sh PREFIX [--leveldb-symlink] [--lib-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/install-capi.sh PREFIX [--leveldb-symlink] [--lib-dir DIR]"
prefix="${1:?$usage}"
shift
symlink=0; target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --leveldb-symlink) symlink=1 ;;
    --lib-dir) target="${2:?$usage}"; shift ;;
    *) echo "unknown argument: $1; $usage" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$target" ]; then
  cargo build --release -p wisckey-c >&2
  target="${CARGO_TARGET_DIR:-target}/release"
fi
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include/leveldb"
prefix="$(cd "$prefix" && pwd)"
install -m 755 "$target/libwisckey_c.so" "$prefix/lib/libwisckey_c.so"
install -m 644 "$target/libwisckey_c.a" "$prefix/lib/libwisckey_c.a"
install -m 644 capi/include/leveldb/c.h capi/include/leveldb/export.h capi/include/leveldb/LICENSE \
  capi/include/leveldb/AUTHORS \
  "$prefix/include/leveldb/"
# The static library needs the system libraries Rust's standard library uses.
cat >"$prefix/lib/pkgconfig/wisckey_c.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: wisckey_c
Description: LevelDB's C API (leveldb/c.h) on the wisckey storage engine
Version: $(sed -n 's/^version = "\(.*\)"/\1/p' capi/Cargo.toml | head -1)
Cflags: -I\${includedir}
Libs: -L\${libdir} -lwisckey_c
Libs.private: -lpthread -ldl -lm -lgcc_s
PC
if [ "$symlink" = 1 ]; then
  ln -sf libwisckey_c.so "$prefix/lib/libleveldb.so"
  ln -sf libwisckey_c.a "$prefix/lib/libleveldb.a"
fi
echo "installed under $prefix: lib/libwisckey_c.{so,a}$([ "$symlink" = 1 ] && echo ', lib/libleveldb.{so,a}'), include/leveldb/c.h, lib/pkgconfig/wisckey_c.pc"
