#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan; fuzz/README.md) in build-fuzz/ and runs each
# for fuzz_seconds (default 20) from its seeds: `meson test --suite fuzz`. Only the readers and
# their libraries are built, not the op modules. Usage: tools/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --packages-only
dir=build-fuzz
opts=(-Dfuzz=enabled -Db_sanitize=address,undefined -Db_lundef=false -Dtests=disabled -Dbench=disabled
      -Dcuda=disabled -Dhip=disabled)
[[ -n ${1:-} ]] && opts+=("-Dfuzz_seconds=$1")
if [[ -f $dir/build.ninja ]]; then
  meson setup --reconfigure "$dir" "${opts[@]}" >/dev/null
else
  CXX=clang++ meson setup "$dir" "${opts[@]}" >/dev/null
fi
mapfile -t targets < <(ninja -C "$dir" -t targets all | sed -nE 's|^(fuzz/fuzz_[a-z_]+): .*|\1|p' | sort -u)
((${#targets[@]})) || { echo "fuzz: no fuzz targets configured in $dir" >&2; exit 1; }
ninja -C "$dir" "${targets[@]}"
meson test -C "$dir" --no-rebuild --suite fuzz --print-errorlogs --num-processes 2
