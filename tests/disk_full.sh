#!/usr/bin/env bash
# Every writer of a user-visible file under a full disk: each command runs with a file-size limit
# (RLIMIT_FSIZE, SIGXFSZ ignored, so a write past it fails with EFBIG as it would with ENOSPC) below
# the size of what it writes. Each must exit non-zero with one line naming the file, leave no file
# at the target path (nor a temporary beside it), and leave a file the user already had untouched.
# Usage: disk_full.sh SOURCE_ROOT OPFORGE
set -euo pipefail
source=$1 opforge=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/opforge-diskfull.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
checked=0

# limited KIB CMD...: runs CMD with files capped at KIB KiB; prints its stderr, returns its status
limited() {
  local kib=$1
  shift
  (trap '' XFSZ; ulimit -f "$kib"; exec "$@") 2>"$tmp/err" >/dev/null && return 0 || return $?
}

# expect_refused WHAT TARGET KIB CMD...: CMD must fail under the limit with one line naming TARGET's
# name, and TARGET must be as before (absent, or the user's bytes)
expect_refused() {
  local what=$1 target=$2 kib=$3
  shift 3
  local before=absent
  [[ -e $target ]] && before=$(sha256sum <"$target")
  if limited "$kib" "$@"; then fail "$what: succeeded with files limited to $kib KiB"; fi
  local lines
  lines=$(grep -c . "$tmp/err" || true)
  [[ $lines == 1 ]] || fail "$what: expected one error line, got $lines: $(cat "$tmp/err")"
  grep -q "$(basename "$target")" "$tmp/err" || fail "$what: error does not name $(basename "$target"): $(cat "$tmp/err")"
  grep -qiE 'too large|no space|write' "$tmp/err" || fail "$what: error does not say the write failed: $(cat "$tmp/err")"
  local after=absent
  [[ -e $target ]] && after=$(sha256sum <"$target")
  [[ $before == "$after" ]] || fail "$what: $target changed ($before -> $after)"
  local litter
  litter=$(find "$(dirname "$target")" -maxdepth 2 -name '*tmp*' -newer "$tmp/stamp" | head -n 1)
  [[ -z $litter ]] || fail "$what: left a temporary behind: $litter"
  echo "ok: $what: $(cat "$tmp/err")"
  checked=$((checked + 1))
}

touch "$tmp/stamp"

# ---- Chakra writers (the data the regression suite uses; built only with -Dchakra)
# (`opforge chakra --help` would print the top-level help and succeed in a build without chakra)
if "$opforge" --help | grep -qE '^ +chakra +'; then
  data=$source/chakra/tests/data/traces/synthetic-linked
  gzip -dc "$data/c102_linked.ref.json.gz" >linked.json                # ~830 KB host+device trace
  gzip -dc "$data/c102_host_unlinked.ref.et.gz" >/dev/null              # the corpus is readable
  "$opforge" chakra convert linked.json full.et >/dev/null               # ~135 KB, the input of the next ones

  expect_refused "chakra convert" "$tmp/new.et" 16 "$opforge" chakra convert linked.json new.et
  printf 'the user file\n' >kept.et
  expect_refused "chakra convert over an existing file" "$tmp/kept.et" 16 "$opforge" chakra convert linked.json kept.et
  expect_refused "chakra jsonize" "$tmp/full.json" 16 "$opforge" chakra jsonize full.et full.json
  expect_refused "chakra visualize (html)" "$tmp/g.html" 16 "$opforge" chakra visualize full.et -o g.html
  expect_refused "chakra scale (gzip)" "$tmp/scaled.json.gz" 16 "$opforge" chakra scale linked.json -n 8 -o scaled.json.gz
  expect_refused "chakra generate" "$tmp/gen.0.et" 4 "$opforge" chakra generate --kind chain --nodes 300 -o gen
  [[ ! -e gen.1.et ]] || fail "chakra generate: wrote gen.1.et after gen.0.et failed"
else
  echo "skip part: this opforge has no chakra subcommand (-Dchakra disabled)"
fi

# ---- opforge op: several outputs, all or nothing
if "$opforge" op layer_norm --describe >/dev/null 2>&1; then
  python3 - <<'PY'
import random, struct
def save(path, shape, lo, hi):
    n = 1
    for s in shape: n *= s
    dims = "(%s)" % ("%d," % shape[0] if len(shape) == 1 else ", ".join(map(str, shape)))
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % dims
    hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%df" % n, *[random.uniform(lo, hi) for _ in range(n)]))
random.seed(7)
save("x.npy", (64, 1024), -1, 1)      # y is 256 KiB, mean and rstd 256 B: the small ones fit
save("gamma.npy", (1024,), 0.5, 1.5)
save("beta.npy", (1024,), -1, 1)
PY
  args=(op layer_norm --in x=x.npy --in gamma=gamma.npy --in beta=beta.npy)
  # first without a limit: in a JIT build this compiles the module (a compiler under the limit
  # fails, as it would on a full disk) into a cache of the test's own
  export OPFORGE_CACHE_DIR=$tmp/jit-cache
  "$opforge" "${args[@]}" --out out3 >/dev/null || fail "opforge op without a limit failed"
  [[ -s out3/y.npy && -s out3/mean.npy && -s out3/rstd.npy ]] || fail "opforge op without a limit: outputs missing"
  expect_refused "opforge op (new directory)" "$tmp/out1" 64 "$opforge" "${args[@]}" --out out1
  grep -qF "$tmp/out1/y.npy" "$tmp/err" || fail "opforge op: the error does not name $tmp/out1/y.npy"
  mkdir out2
  printf 'the user file\n' >out2/y.npy
  expect_refused "opforge op --force over the user's y.npy" "$tmp/out2/y.npy" 64 "$opforge" "${args[@]}" --out out2 --force
  grep -qF "$tmp/out2/y.npy" "$tmp/err" || fail "opforge op: the error does not name $tmp/out2/y.npy"
  [[ ! -e out2/mean.npy && ! -e out2/rstd.npy ]] || fail "opforge op: wrote mean/rstd although y failed"
else
  echo "skip part: layer_norm is not enabled in this build"
fi

((checked > 0)) || { echo "SKIP: neither the chakra writers nor layer_norm are in this build"; exit 77; }
echo "$checked writers refuse cleanly on a full disk"
