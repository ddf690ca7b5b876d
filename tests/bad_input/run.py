#!/usr/bin/env python3
"""Runs the bad-input catalogue (catalogue.toml beside this file) against the opforge CLI.

Every case writes its input files into a fresh directory, runs one command there, and checks the
contract every reader of a user's file keeps (CONTRIBUTING.md, "Bad input"): the expected non-zero
exit, exactly one line on stderr that names the file, the position and the problem (each of the
case's `expect` strings), and no change at all in the case's directory: nothing created (no partial
output, no temp file left), nothing a user had removed or rewritten.

usage: run.py OPFORGE [--filter REGEX] [--list]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def npy_bytes(spec):
    """A .npy file from a table: descr, shape, fortran, and overrides to break it on purpose."""
    if "header" in spec:
        header = spec["header"]
    else:
        shape = spec.get("shape", [2, 3])
        shape_text = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        fortran = "True" if spec.get("fortran", False) else "False"
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (spec.get("descr", "<f4"), fortran,
                                                                            shape_text)
    magic = bytes.fromhex(spec.get("magic_hex", "934e554d5059"))
    version = bytes(spec.get("version", [1, 0]))
    pre = magic + version
    header_len = 2 if version[0] == 1 else 4
    body = header.encode("latin-1")
    total = len(pre) + header_len + len(body) + 1
    body += b" " * ((64 - total % 64) % 64) + b"\n"
    length = spec.get("header_len", len(body))
    out = pre + length.to_bytes(header_len, "little") + body
    if "data_bytes" in spec:
        count = spec["data_bytes"]
    else:
        count = 1
        for s in spec.get("shape", [2, 3]):
            count *= s
        count *= int(re.sub(r"\D", "", spec.get("descr", "<f4")) or 1)
    # a ramp of small non-zero values: never zeros (a reader must not be tested on zeros)
    out += bytes((i % 97) + 1 for i in range(count))
    return out


def write_inputs(case, root):
    for name, text in case.get("files", {}).items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text.replace("{dir}", root))
    for name, hexdata in case.get("bytes", {}).items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(bytes.fromhex(hexdata))
    for name, spec in case.get("npy", {}).items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(npy_bytes(spec))
    for name, spec in case.get("derive", {}).items():
        # a file of the repo with one deliberate break: each pattern must still match the source,
        # so a case cannot silently stop testing anything when that file changes
        with open(os.path.join(REPO, spec["source"]), encoding="utf-8") as f:
            text = f.read()
        for pattern, repl in spec.get("sub", []):
            text, n = re.subn(pattern, repl, text, count=1, flags=re.M)
            if n == 0:
                raise ValueError(f"{case['name']}: pattern {pattern!r} no longer matches {spec['source']}")
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    for name in case.get("dirs", []):
        os.makedirs(os.path.join(root, name), exist_ok=True)


def snapshot(root):
    seen = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, root)
            if os.path.isdir(path) and not os.path.islink(path):
                seen[rel] = "dir"
            else:
                with open(path, "rb") as f:
                    seen[rel] = hashlib.sha256(f.read()).hexdigest()
    return seen


def cpu_ops(opforge):
    """The ops this build can run on the CPU (an op switched off at configure is not listed)."""
    p = subprocess.run([opforge, "ops", "--json"], capture_output=True, timeout=120, check=True)
    rows = json.loads(p.stdout)["ops"]
    return {r["op"] for r in rows if r["backend"] == "cpu" and r["enabled"]}


def run_case(opforge, case, scratch):
    root = tempfile.mkdtemp(prefix="case-", dir=scratch)
    write_inputs(case, root)
    before = snapshot(root)
    args = [a.replace("{dir}", root).replace("{repo}", REPO) for a in case["args"]]
    env = dict(os.environ)
    env.setdefault("OPFORGE_CACHE_DIR", os.path.join(scratch, "jit-cache"))  # outside the case dir
    env.update(case.get("env", {}))
    stdin = case.get("stdin")
    program = [a.replace("{repo}", REPO) for a in case.get("program", [opforge])]
    p = subprocess.run(program + args, cwd=root, env=env, capture_output=True, timeout=case.get("timeout", 120),
                       input=stdin.encode() if stdin is not None else None)
    err = p.stderr.decode("utf-8", "replace")
    lines = [l for l in err.split("\n") if l.strip()]
    problems = []
    # gate, op and ab keep 1 for "regression found" / "the call failed"; bad input is 2 there
    want = case.get("exit", 2 if "program" not in case and case["args"][0] in ("gate", "op", "ab") else 1)
    if p.returncode != want:
        problems.append(f"exit {p.returncode}, expected {want}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, expected 1")
    line = lines[0] if lines else ""
    for s in case.get("expect", []):
        if s.replace("{dir}", root) not in line:
            problems.append(f"the message lacks {s!r}")
    after = snapshot(root)
    for rel in sorted(set(before) | set(after)):
        if rel not in after:
            problems.append(f"{rel} was removed")
        elif rel not in before:
            problems.append(f"{rel} was created")
        elif before[rel] != after[rel]:
            problems.append(f"{rel} was changed")
    shown = line.replace(root + "/", "").replace(root, ".")
    return problems, shown, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("opforge")
    ap.add_argument("--filter", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--catalogue", default=os.path.join(HERE, "catalogue.toml"))
    a = ap.parse_args()
    a.opforge = os.path.abspath(a.opforge)
    with open(a.catalogue, "rb") as f:
        cases = tomllib.load(f)["case"]
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        print(f"{a.catalogue}: duplicate case names: {sorted(dup)}", file=sys.stderr)
        return 2
    cases = [c for c in cases if re.search(a.filter, c["name"])]
    if a.list:
        for c in cases:
            print(c["name"], "-", c["reader"])
        return 0
    if not cases:
        print(f"no case matches {a.filter!r}: nothing was checked", file=sys.stderr)
        return 1
    failed = skipped = 0
    by_reader = {}
    built = cpu_ops(a.opforge)
    with tempfile.TemporaryDirectory(prefix="opforge-bad-input-") as scratch:
        for c in cases:
            # `opforge op OP ...` needs OP in this build, unless the case is about an unknown op
            needs = c["args"][0] == "op" and "program" not in c and c.get("needs_op", True)
            if needs and c["args"][1] not in built:
                skipped += 1
                print(f"skip {c['name']}: op {c['args'][1]} is not in this build")
                continue
            problems, line, lines = run_case(a.opforge, c, scratch)
            by_reader[c["reader"]] = by_reader.get(c["reader"], 0) + 1
            if problems:
                failed += 1
                print(f"FAIL {c['name']}: {'; '.join(problems)}")
                for l in lines[:5]:
                    print(f"     stderr: {l}")
            else:
                print(f"ok   {c['name']}: {line}")
    print("cases per reader: " + ", ".join(f"{k} {v}" for k, v in sorted(by_reader.items())))
    ran = len(cases) - skipped
    print(f"{ran - failed} of {ran} bad-input cases kept the contract, {failed} did not, {skipped} skipped")
    if ran == 0:
        print("no case ran: nothing was checked", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
