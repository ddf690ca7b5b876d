#!/usr/bin/env bash
# opforge as a Meson subproject: examples/downstream with subprojects/opforge linked to this source
# tree and --wrap-mode=forcefallback, so its dependency('opforge', fallback: 'opforge') takes what
# opforge hands over with meson.override_dependency. Builds only what the example needs (the
# library and layer_norm's CPU module; the other ops, GPU backends and suites off) and runs it: the
# module must be the subproject build tree's.
# Usage: subproject.sh SOURCE_ROOT
set -euo pipefail
source=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -z ${OPFORGE_WORKFLOW_REPLAY:-} ]] || { echo "SKIP: inside a cell of a workflow replay (the enclosing build runs this)"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/opforge-subproject.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/super/subprojects"
cp "$source/examples/downstream/meson.build" "$source/examples/downstream/main.cpp" "$tmp/super/"
ln -s "$source" "$tmp/super/subprojects/opforge"

# auto_features is not a per-subproject option in Meson 1.0: switch the rest off one by one
opts=(-Dopforge:tests=disabled -Dopforge:bench=disabled -Dopforge:chakra=disabled -Dopforge:cuda=disabled
      -Dopforge:hip=disabled -Dopforge:layer_norm=enabled)
for op in $(sed -nE 's/^\[op\.([a-z0-9_]+)\]$/\1/p' "$source/kernels/manifest.toml"); do
  [[ $op == layer_norm ]] || opts+=("-Dopforge:$op=disabled")
done
# the build dir inside the superproject keeps every compile line independent of $tmp: ccache hits
meson setup "$tmp/super/b" "$tmp/super" --wrap-mode=forcefallback "${opts[@]}" >"$tmp/setup.log" 2>&1 ||
  { cat "$tmp/setup.log"; fail "configuring examples/downstream with opforge as a subproject failed"; }
grep -q "Run-time dependency opforge found: YES" "$tmp/setup.log" && fail "pkg-config found an installed opforge despite forcefallback"
ninja -C "$tmp/super/b" downstream subprojects/opforge/kernels/opf_layer_norm_cpu.so >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "building examples/downstream with opforge as a subproject failed"; }
out=$("$tmp/super/b/downstream") || fail "examples/downstream failed: $out"
echo "$out"
[[ $out == *"from prebuilt module $tmp/super/b/subprojects/opforge/kernels/opf_layer_norm_cpu.so:"* ]] ||
  fail "expected the subproject build tree's module"
