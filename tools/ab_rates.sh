#!/usr/bin/env bash
# What `opforge ab` delivers on this machine: its false-alarm and detection rates (issue 13).
#   aa        A/A: the build against itself, AB_REPEAT independent runs (--repeat: each run in its
#             own pair of processes of the same build): the share of runs with anything SLOWER.
#   slow10    A/B: the same build, the head's calls of one op (AB_SLOW_OP) made 10 % slower by the
#             calibration hook (OPFORGE_AB_SLOWDOWN): in how many runs each benchmark is SLOWER.
#   rms_norm  A/B: HEAD against a patched copy whose rms_norm forward recomputes its sum of squares
#             three more times (tools/ab/rms_norm_regression.patch): its verdicts, once.
# usage: tools/ab_rates.sh OUT [aa|slow10|rms_norm|all] [more `opforge ab` arguments]
# env: AB_OPS="op ..." (aa, rms_norm; default: every op), AB_REPEAT (20), AB_ROUNDS (10),
#      AB_BLOCK (0.05 s), AB_SLOW_OP (rms_norm), BUILD (this tree's prebuilt build dir, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/ab_rates.sh OUT [aa|slow10|rms_norm|all] [opforge ab args]}
what=${2:-all}
shift $(( $# >= 2 ? 2 : 1 ))
build=${BUILD:-build}
opforge=$build/harness/opforge
repeat=${AB_REPEAT:-20} rounds=${AB_ROUNDS:-10} block=${AB_BLOCK:-0.05} slow_op=${AB_SLOW_OP:-rms_norm}
ops=()
for op in ${AB_OPS:-}; do ops+=(--op "$op"); done
mkdir -p "$out"
common=(--rounds "$rounds" --block-seconds "$block" --no-instructions --force)

summary() {  # ab.json -> one line per run kind
  python3 - "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1])); kind = sys.argv[2]
gated = [b for b in doc["benchmarks"] if b["role"] == "gated" and "per_run" in b]
runs = doc.get("runs", [])
if kind == "aa":
    bad = sum(1 for r in runs if r["SLOWER"] > 0)
    calls = sum(len(b["per_run"]) for b in gated)
    slower = sum(b["per_run"].count("SLOWER") for b in gated)
    print(f"A/A: {len(gated)} benchmarks x {len(runs)} runs: runs with any SLOWER {bad}/{len(runs)} "
          f"({100.0 * bad / max(1, len(runs)):.1f} %); SLOWER verdicts {slower}/{calls} per benchmark run "
          f"({100.0 * slower / max(1, calls):.2f} %); AMBIGUOUS {sum(b['per_run'].count('AMBIGUOUS') for b in gated)}")
    # runs SLOWER in the first pair of processes that a second pair did not confirm (opforge ab)
    first = [c for b in gated for c in b.get("confirmations", []) if c["run"] != "all"]
    print(f"  SLOWER in the first pair of processes: {len(first)} benchmark runs; confirmed by a second pair: "
          f"{sum(1 for c in first if c['verdict'] == 'SLOWER')}")
    for b in gated:
        for c in b.get("confirmations", []):
            if c["run"] != "all":
                print(f"  first pair SLOWER: {b['name']} run {c['run']}: second pair {c['verdict']}")
    for b in gated:
        if "SLOWER" in b["per_run"]:
            print(f"  false alarm: {b['name']} {b['per_run'].count('SLOWER')}x")
else:
    for b in gated:
        print(f"{kind}: {b['name']}: SLOWER in {b['per_run'].count('SLOWER')}/{len(b['per_run'])} runs, "
              f"median ratio {b['median_ratio']:.3f}")
PY
}

if [[ $what == aa || $what == all ]]; then
  "$opforge" ab --base "$build" --head "$build" --no-build "${ops[@]}" --repeat "$repeat" "${common[@]}" --out "$out/aa" "$@" > /dev/null || true
  summary "$out/aa/ab.json" aa | tee "$out/aa.txt"
fi
if [[ $what == slow10 || $what == all ]]; then
  "$opforge" ab --base "$build" --head "$build" --no-build --op "$slow_op" --repeat 10 "${common[@]}" \
    --head-env "OPFORGE_AB_SLOWDOWN=^$slow_op/=0.10" --out "$out/slow10" "$@" > /dev/null || true
  summary "$out/slow10/ab.json" "10 % slower $slow_op" | tee "$out/slow10.txt"
fi
if [[ $what == rms_norm || $what == all ]]; then
  src=$out/rms_norm-src
  rm -rf "$src" && mkdir -p "$src"
  git archive HEAD | tar -x -C "$src"
  (cd "$src" && git apply "$OLDPWD/tools/ab/rms_norm_regression.patch")  # not a repository: git apply as plain patch
  "$opforge" ab --base HEAD --head "$src" "${ops[@]}" "${common[@]}" --out "$out/rms_norm" "$@" > /dev/null || true
  python3 - "$out/rms_norm/ab.json" <<'PY' | tee "$out/rms_norm.txt"
import json, sys
doc = json.load(open(sys.argv[1]))
g = [b for b in doc["benchmarks"] if b["role"] == "gated"]
slow = [b for b in g if b["verdict"] == "SLOWER"]
fwd = [b for b in g if b["name"].startswith("rms_norm/") and "/forward/" in b["name"]]
print(f"rms_norm regression: {len(slow)} SLOWER of {len(g)}; rms_norm forward SLOWER {sum(b['verdict'] == 'SLOWER' for b in fwd)}/{len(fwd)}; "
      f"others SLOWER: {[b['name'] for b in slow if b not in fwd]}")
for b in fwd: print(f"  {b['name']}: {b['verdict']} {b.get('median_ratio', 0):.3f}")
PY
fi
