#!/usr/bin/env bash
# `opforge matrix run` under faults, against a stand-in `meson` whose builds are empty directories
# (seconds, no compiler): cell one's compiler is killed (SIGKILL), cell two's compile hangs and the
# run gets SIGINT (or SIGTERM). Checks that the killed compiler is one clear failure of that cell only,
# that the finished cell stays recorded, that run.json says "interrupted" and the exit status is 130,
# and that `--resume` runs only the unfinished cells, keeps the finished one and ends "finished".
# Usage: interrupt_resume.sh SOURCE_ROOT OPFORGE [INT|TERM]
set -euo pipefail
source=$1 opforge=$2 sig=${3:-INT}
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/opforge-interrupt.XXXXXX")
pid=
trap '[[ -n $pid ]] && kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
real_meson=$(command -v meson) || fail "meson not found"

# The stand-in: setup/compile of the cells' builds are faked (FAKE_KILL_AT / FAKE_HANG_AT: the
# n-th compile of this run kills itself / hangs), their introspection is empty; everything else
# (the source tree's options, --version) is the real meson.
cat >"$tmp/bin/meson" <<'SH'
#!/usr/bin/env bash
case $1 in
  setup)
    build=${@: -2:1}
    mkdir -p "$build" && touch "$build/.fake-build"
    echo "setup $build" >>"$FAKE_DIR/calls"
    exit 0 ;;
  compile)
    echo "compile $3" >>"$FAKE_DIR/calls"
    n=$(grep -c '^compile' "$FAKE_DIR/calls")
    [[ $n == "${FAKE_KILL_AT:-}" ]] && kill -KILL $$
    if [[ $n == "${FAKE_HANG_AT:-}" ]]; then
      touch "$FAKE_DIR/hanging"
      sleep 300
    fi
    exit 0 ;;
  introspect)
    if [[ -f $2/.fake-build ]]; then echo '[]'; exit 0; fi ;;
esac
exec "$REAL_MESON" "$@"
SH
chmod +x "$tmp/bin/meson"

cat >"$tmp/m.toml" <<'TOML'
schema = 1
description = "interrupt and resume"
[base]
tests = "disabled"
[[cell]]
name = "one"
options = { mode = "prebuilt" }
[[cell]]
name = "two"
options = { mode = "jit" }
[[cell]]
name = "three"
options = { mode = "prebuilt", bench = "disabled" }
[run]
bench = false
callgrind = false
TOML

export PATH=$tmp/bin:$PATH REAL_MESON=$real_meson FAKE_DIR=$tmp
run=$tmp/run
cd "$source"
FAKE_KILL_AT=1 FAKE_HANG_AT=2 "$opforge" matrix run "$tmp/m.toml" --out "$run" >"$tmp/first.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -f $tmp/hanging ]] && break
  kill -0 $pid 2>/dev/null || fail "the run ended before cell two's compile: $(cat "$tmp/first.log")"
  sleep 0.1
done
[[ -f $tmp/hanging ]] || fail "cell two's compile never started: $(cat "$tmp/first.log")"
kill -$sig $pid
rc=0
wait $pid || rc=$?
pid=
cat "$tmp/first.log"
[[ $rc == 130 ]] || fail "interrupted run: exit $rc, expected 130"

cell_dir() { grep -l "\"name\": \"$1\"" "$run"/cells/*/cell.json 2>/dev/null | xargs -r dirname; }
status_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$1"; }
one=$(cell_dir one)
[[ -n $one ]] || fail "cell one (finished before the signal) is not recorded"
[[ $(status_of "$one/cell.json") == fail ]] || fail "cell one: status $(status_of "$one/cell.json"), expected fail"
python3 - "$one/cell.json" <<'PY' || fail "cell one's compile step does not say the compiler was killed"
import json, sys
steps = {s["name"]: s for s in json.load(open(sys.argv[1]))["steps"]}
c = steps["compile"]
assert c["status"] == "crash" and "SIGKILL" in c["detail"] and "\n" not in c["detail"], c
PY
grep -q "FAIL  cell 1 one .* -- compile: .*SIGKILL" "$tmp/first.log" || fail "no one-line FAIL naming the killed compiler on the console"
two=$(cell_dir two)
[[ -z $two || $(status_of "$two/cell.json") == interrupted ]] || fail "cell two is recorded as finished after the signal"
[[ -z $(cell_dir three) ]] || fail "cell three ran after the signal"
[[ $(status_of "$run/run.json") == interrupted ]] || fail "run.json: status $(status_of "$run/run.json"), expected interrupted"
grep -q "INTERRUPTED (continue with --resume)" "$tmp/first.log" || fail "the console does not say how to continue"

# Resume: nothing hangs now; only cells two and three are built.
: >"$tmp/calls"
rc=0
"$opforge" matrix run --resume "$run" >"$tmp/second.log" 2>&1 || rc=$?
cat "$tmp/second.log"
[[ $rc == 1 ]] || fail "resumed run: exit $rc, expected 1 (failed cells)"
grep -q "one .*finished in the interrupted run, kept" "$tmp/second.log" || fail "cell one was not kept"
[[ $(grep -c '^compile' "$tmp/calls") == 2 ]] || fail "resume compiled $(grep -c '^compile' "$tmp/calls") cells, expected 2"
grep -q "compile $one/" "$tmp/calls" && fail "resume rebuilt the finished cell one"
for c in two three; do
  d=$(cell_dir $c)
  # the stand-in's empty builds fail the inventory step: finished either way is what counts here
  [[ -n $d && $(status_of "$d/cell.json") =~ ^(pass|fail)$ ]] || fail "cell $c did not finish on resume"
done
[[ $(status_of "$one/cell.json") == fail ]] || fail "cell one's record changed on resume"
[[ $(status_of "$run/run.json") == finished ]] || fail "run.json after resume: $(status_of "$run/run.json"), expected finished"
python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))["resumed_utc"]) == 1' "$run/run.json" ||
  fail "run.json does not record the resume"
echo "interrupt_resume ($sig): PASS"
