#!/usr/bin/env bash
# `meson install --destdir` of this build into a temporary prefix, which is then moved elsewhere
# (the install must not care where it was put), and examples/downstream built against the moved
# tree with pkg-config and run, in this build's module mode: prebuilt loads the installed module,
# jit compiles layer_norm from the installed sources into an empty cache. Also checks the installed
# CLI, that no text file of the install names the build tree, and what a missing JIT compiler does.
# Usage: install_downstream.sh BUILD_ROOT SOURCE_ROOT PREFIX LIBDIR BINDIR VERSION MODE [B_SANITIZE]
set -euo pipefail
build=$1 source=$2 prefix=$3 libdir=$4 bindir=$5 version=$6 mode=$7 sanitize=${8:-none}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v pkg-config >/dev/null || skip "pkg-config not found (tools/setup.sh installs it)"
[[ $libdir != /* && $bindir != /* ]] || skip "libdir/bindir outside the prefix ($libdir, $bindir): nothing to relocate as one tree"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/opforge-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# --no-rebuild: `meson test` has built everything; installing only copies
meson install -C "$build" --destdir "$tmp/stage" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "meson install failed"; }
# A relocatable opforge.pc (pkgconfig.relocatable, meson.build's default) goes wherever the tree
# goes; a build dir configured before that default needs PKG_CONFIG_SYSROOT_DIR and keeps the prefix.
pc=$tmp/stage$prefix/$libdir/pkgconfig/opforge.pc
[[ -f $pc ]] || fail "no $pc installed"
if grep -q '^prefix=${pcfiledir}' "$pc"; then
  root=$tmp/moved/opt/opforge
else
  echo "note: opforge.pc is not relocatable (configure with -Dpkgconfig.relocatable=true); using PKG_CONFIG_SYSROOT_DIR"
  root=$tmp/moved$prefix
  export PKG_CONFIG_SYSROOT_DIR=$tmp/moved
fi
mkdir -p "$(dirname "$root")"
mv "$tmp/stage$prefix" "$root"
pkgdir=$root/$libdir/opforge/$version
[[ -f $pkgdir/kernels/include/opforge/abi.h ]] || fail "no JIT sources at $pkgdir/kernels"

# No installed text file may point into the build or source tree. (The PCH manifest records where
# its .gch was built; the loader checks the .gch beside the header, never that line.)
if leaks=$(grep -rlI --exclude=opf_jit_pch.h.manifest -e "$build" -e "$source/" "$root"); then
  fail "installed files name the build or source tree: $leaks"
fi

# The installed CLI finds the moved install's modules.
"$root/$bindir/opforge" ops --json >"$tmp/ops.json" || fail "installed opforge ops failed"
grep -q "\"module_dir\": \"$pkgdir/modules\"" "$tmp/ops.json" ||
  fail "installed opforge ops: module_dir is not $pkgdir/modules: $(grep module_dir "$tmp/ops.json")"

# The example, with nothing but PKG_CONFIG_PATH pointing at the install (nofallback: pkg-config or fail)
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig
# a sanitized libopforge needs its runtime first in the executable: the example gets the same sanitizers
san_args=()
[[ $sanitize == none ]] || san_args=("-Db_sanitize=$sanitize" -Db_lundef=false)
meson setup "$tmp/example" "$source/examples/downstream" --wrap-mode=nofallback "${san_args[@]}" >"$tmp/example.log" 2>&1 &&
  meson compile -C "$tmp/example" >>"$tmp/example.log" 2>&1 || { cat "$tmp/example.log"; fail "building examples/downstream against the install failed"; }
run() { env OPFORGE_CACHE_DIR="$tmp/cache" "$@" "$tmp/example/downstream"; }

out=$(run) || fail "examples/downstream failed: $out"
echo "$out"
case $mode in
  prebuilt | both)
    [[ $out == *"from prebuilt module $pkgdir/modules/opf_layer_norm_cpu.so:"* ]] ||
      fail "expected the installed prebuilt module under $pkgdir/modules"
    # the JIT is still there for what prebuilt modules do not cover (tuning overrides)
    out=$(run OPFORGE_FORCE_JIT=1) || fail "examples/downstream with OPFORGE_FORCE_JIT=1 failed: $out"
    echo "$out"
    ;;
esac
# (a CPU JIT module may be one cache entry, or one per (entry, dtype) pair under this directory)
[[ $out == *"from jit-"*" module $tmp/cache/layer_norm/cpu"* || $mode != jit ]] || fail "expected a JIT module in $tmp/cache"
if [[ $out == *"from jit-"* ]]; then
  logs=("$tmp"/cache/layer_norm/cpu/*/compile.log)
  [[ -f ${logs[0]} ]] || fail "the JIT left no compile.log in $tmp/cache/layer_norm/cpu"
  grep -q -- "$pkgdir/kernels/ops/layer_norm/cpu.cpp" "${logs[@]}" ||
    fail "the JIT did not compile the installed sources: $(head -c 600 "${logs[0]}")"
  if [[ -f $pkgdir/jit/opf_jit_pch.h ]]; then
    grep -q -- "-include $pkgdir/jit/opf_jit_pch.h" "${logs[@]}" ||
      fail "the JIT did not use the installed precompiled header: $(head -c 600 "${logs[0]}")"
  fi
fi

# The JIT runs the compiler it recorded (by name, found on PATH). Without it the load fails with
# one line naming it (after a warning that the PCH does not fit a missing compiler either), exit 1;
# prebuilt modules load as before.
rm -rf "$tmp/cache"
if out=$(run PATH=/nonexistent OPFORGE_FORCE_JIT=1 2>&1); then fail "a JIT without its compiler succeeded: $out"; fi
[[ $(echo "$out" | tail -n 1) == "downstream: "*"cpu JIT of layer_norm: cannot run compiler '"*"': No such file or directory"* ]] ||
  fail "missing compiler: expected a last line naming it, got: $out"
echo "without a compiler on PATH:"
echo "$out"
if [[ $mode != jit ]]; then
  out=$(run PATH=/nonexistent) || fail "a prebuilt module needed a compiler: $out"
fi
echo "install at $root: ok"
