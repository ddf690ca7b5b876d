#!/usr/bin/env python3
"""Reads kernels/manifest.toml for Meson and generates the C++ op table.

  manifest.py list   MANIFEST OPTIONS_FILE OPS_DIR   -> one line per op: name|backend,backend|meson?|TUNE=v,...|backend:lib,lib;...
  manifest.py header MANIFEST OUT_H  SPEC...         -> generated table; SPEC = op:enabled_backends:prebuilt_backends[:launch]

Errors are one line, `file:line: problem`, exit status 1, so Meson stops configure with it.
"""
import os
import re
import sys
import tomllib

KNOWN_BACKENDS = {"cpu": "cpu.cpp", "cuda": "kernel.cu", "hip": "kernel.cu"}
FLOAT_DTYPES = {"f32", "f16", "bf16", "f64"}
FIXED_DTYPES = FLOAT_DTYPES | {"u8", "i32", "i64"}
ROLES = {"in", "out", "inout"}
PARAM_TYPES = {"f64", "i64", "bool", "enum"}
PARAM_KEYS = {"type", "default", "min", "max", "above", "below", "choices", "sample", "sweep", "doc", "jit_variant", "jit_values"}
REQUIRED = ["summary", "entries", "dtypes", "backends", "cases"]
NAME = r"[a-z][a-z0-9_]*"
# "NAME: ROLE [list] DTYPE [SHAPE] [view]"; SHAPE may list alternative layouts: "[B, T, U, H] | [rows, H]"
ARG_RE = re.compile(r"^\s*(" + NAME + r")\s*:\s*(in|out|inout)\s+(list\s+)?(T|acc|[a-z0-9]+)\s*(\[[^\]]*\](?:\s*\|\s*\[[^\]]*\])*)?\s*(view)?\s*$")


def fail(path, line, msg):
    sys.stderr.write(f"{path}:{line}: {msg}\n")
    sys.exit(1)


def line_of(text, pattern, start=1):
    for i, l in enumerate(text.splitlines(), 1):
        if i >= start and re.search(pattern, l):
            return i
    return start


def load(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(path, 0, f"cannot read manifest: {e.strerror}")
    text = raw.decode("utf-8", errors="replace")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        fail(path, m.group(1) if m else 1, f"invalid TOML: {e}")
    ops = data.get("op")
    if not isinstance(ops, dict) or not ops:
        fail(path, 1, "no [op.<name>] tables")
    return text, ops


def parse_arg(spec):
    """-> dict(name, role, list, dtype, shape, view) or None"""
    if not isinstance(spec, str):
        return None
    m = ARG_RE.match(spec)
    if not m:
        return None
    name, role, lst, dtype, shape, view = m.groups()
    if dtype not in ("T", "acc") and dtype not in FIXED_DTYPES:
        return None
    return {"name": name, "role": role, "list": bool(lst), "dtype": dtype, "shape": shape or "", "view": bool(view)}


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_params(path, text, name, where, params, entries):
    if not isinstance(params, dict):
        fail(path, where, f"op '{name}': params must be a table of {{ type = ..., default = ... }}")
    for pname, p in params.items():
        at = line_of(text, r"^\s*" + re.escape(pname) + r"\s*=", where)
        if not re.fullmatch(NAME, pname):
            fail(path, at, f"op '{name}': param '{pname}': name must be snake_case")
        if not isinstance(p, dict):
            fail(path, at, f"op '{name}': param '{pname}' must be {{ type = ..., default = ... }}")
        extra = set(p) - PARAM_KEYS
        if extra:
            fail(path, at, f"op '{name}': param '{pname}': unknown key '{sorted(extra)[0]}' (known: {', '.join(sorted(PARAM_KEYS))})")
        t = p.get("type")
        if t not in PARAM_TYPES:
            fail(path, at, f"op '{name}': param '{pname}': type must be one of {', '.join(sorted(PARAM_TYPES))}")
        if "default" not in p:
            fail(path, at, f"op '{name}': param '{pname}': missing default")
        d = p["default"]
        if t == "bool":
            if not isinstance(d, bool):
                fail(path, at, f"op '{name}': param '{pname}': default must be true or false")
        elif t == "enum":
            ch = p.get("choices")
            if not isinstance(ch, list) or len(ch) < 2 or not all(isinstance(c, str) and c for c in ch) or len(set(ch)) != len(ch):
                fail(path, at, f"op '{name}': param '{pname}': enum needs choices = [two or more distinct names]")
            if d not in ch:
                fail(path, at, f"op '{name}': param '{pname}': default '{d}' is not one of its choices")
        else:
            if not is_num(d) or (t == "i64" and not isinstance(d, int)):
                fail(path, at, f"op '{name}': param '{pname}': default must be {'an integer' if t == 'i64' else 'a number'}")
            for k in ("min", "max", "above", "below"):
                if k in p and not is_num(p[k]):
                    fail(path, at, f"op '{name}': param '{pname}': {k} must be a number")
            if "min" in p and "above" in p or "max" in p and "below" in p:
                fail(path, at, f"op '{name}': param '{pname}': give min or above, max or below, not both")
            lo, hi = p.get("min", p.get("above")), p.get("max", p.get("below"))
            if lo is not None and (d < lo or ("above" in p and d == lo)) or hi is not None and (d > hi or ("below" in p and d == hi)):
                fail(path, at, f"op '{name}': param '{pname}': default {d} is outside its range")
            s = p.get("sample")
            if s is None and (lo is None or hi is None):
                fail(path, at, f"op '{name}': param '{pname}': an unbounded range needs sample = [lo, hi] for the sweep")
            if s is not None and (not isinstance(s, list) or len(s) != 2 or not all(is_num(v) for v in s) or s[0] > s[1]):
                fail(path, at, f"op '{name}': param '{pname}': sample must be [lo, hi] with lo <= hi")
            w = p.get("sweep", [])
            if not isinstance(w, list) or not all(is_num(v) and (t == "f64" or isinstance(v, int)) for v in w):
                fail(path, at, f"op '{name}': param '{pname}': sweep must be a list of {'integers' if t == 'i64' else 'numbers'}")
            for v in w:
                if lo is not None and (v < lo or ("above" in p and v == lo)) or hi is not None and (v > hi or ("below" in p and v == hi)):
                    fail(path, at, f"op '{name}': param '{pname}': sweep value {v} is outside its range")
        if t in ("bool", "enum") and "sweep" in p:
            fail(path, at, f"op '{name}': param '{pname}': sweep is for f64/i64 params (the sweep already runs every {t} value)")
        jv = p.get("jit_variant", [])
        if not isinstance(jv, list) or not all(isinstance(e, str) for e in jv) or len(set(jv)) != len(jv):
            fail(path, at, f"op '{name}': param '{pname}': jit_variant must be a list of distinct entry names")
        for e in jv:
            if e not in entries:
                fail(path, at, f"op '{name}': param '{pname}': jit_variant names '{e}', which is not one of its entries")
        if "jit_values" in p:
            vals = p["jit_values"]
            if t not in ("f64", "i64") or not jv:
                fail(path, at, f"op '{name}': param '{pname}': jit_values is for f64/i64 params with a jit_variant")
            if (not isinstance(vals, list) or not vals or not all(is_num(v) and (t == "f64" or isinstance(v, int)) for v in vals)
                    or len(set(vals)) != len(vals)):
                fail(path, at, f"op '{name}': param '{pname}': jit_values must be a list of distinct {'integers' if t == 'i64' else 'numbers'}")


def validate(path, text, ops, options_file=None, ops_dir=None):
    option_names = set()
    if options_file:
        with open(options_file, encoding="utf-8") as f:
            option_names = set(re.findall(r"^\s*option\(\s*'([A-Za-z0-9_]+)'", f.read(), re.M))
    for name, op in ops.items():
        where = line_of(text, r"^\s*\[op\." + re.escape(name) + r"\]")
        if not re.fullmatch(NAME, name):
            fail(path, where, f"op '{name}': name must be snake_case")
        for key in REQUIRED:
            if key not in op:
                fail(path, where, f"op '{name}': missing key '{key}'")
        for b in op["backends"]:
            if b not in KNOWN_BACKENDS:
                fail(path, where, f"op '{name}': unknown backend '{b}' (known: {', '.join(sorted(KNOWN_BACKENDS))})")
        for d in op["dtypes"]:
            if d not in FLOAT_DTYPES:
                fail(path, where, f"op '{name}': unknown storage dtype '{d}' (known: {', '.join(sorted(FLOAT_DTYPES))})")
        entries = op["entries"]
        if not isinstance(entries, dict) or not entries:
            fail(path, where, f"op '{name}': entries must be a table [op.{name}.entries] with one key per entry")
        ew = line_of(text, r"^\s*\[op\." + re.escape(name) + r"\.entries\]", where)
        for ename, args in entries.items():
            at = line_of(text, r"^\s*" + re.escape(ename) + r"\s*=", ew)
            if not re.fullmatch(NAME, ename):
                fail(path, at, f"op '{name}': entry '{ename}': name must be snake_case")
            if not isinstance(args, list) or not args:
                fail(path, at, f"op '{name}': entry '{ename}' must list its arguments")
            seen = set()
            for a in args:
                p = parse_arg(a)
                if p is None:
                    fail(path, at, f"op '{name}': entry '{ename}': argument {a!r} is not 'NAME: ROLE [list] DTYPE [SHAPE] [view]'")
                if p["name"] in seen:
                    fail(path, at, f"op '{name}': entry '{ename}': argument '{p['name']}' listed twice")
                seen.add(p["name"])
        check_params(path, text, name, line_of(text, r"^\s*\[op\." + re.escape(name) + r"\.params\]", where), op.get("params", {}),
                     set(entries))
        for key in ("cases", "bench"):
            for shape in op.get(key, []):
                if not shape or not all(isinstance(v, int) and v > 0 for v in shape):
                    fail(path, where, f"op '{name}': {key} shape {shape} must be a list of positive integers")
        for k, v in op.get("tune", {}).items():
            if not is_num(v):
                fail(path, where, f"op '{name}': tune.{k} must be a number")
        deps = op.get("deps", {})
        if not isinstance(deps, dict):
            fail(path, where, f"op '{name}': deps must be {{ backend = [libraries] }}")
        for b, libs in deps.items():
            if b not in op["backends"]:
                fail(path, where, f"op '{name}': deps.{b}: '{b}' is not one of the op's backends")
            if not isinstance(libs, list) or not all(isinstance(l, str) and re.fullmatch(r"[A-Za-z0-9_.+-]+", l) for l in libs):
                fail(path, where, f"op '{name}': deps.{b} must be a list of library names")
        if options_file and name not in option_names:
            fail(path, where, f"op '{name}' has no option('{name}', type: 'feature', ...) line in {options_file}")
        if ops_dir:
            folder = os.path.join(ops_dir, name)
            need = ["ref.cpp"] + sorted({KNOWN_BACKENDS[b] for b in op["backends"]})
            for fname in need:
                if not os.path.isfile(os.path.join(folder, fname)):
                    fail(path, where, f"op '{name}': declared source {os.path.join(folder, fname)} is missing")


def cmd_list(path, options_file, ops_dir):
    text, ops = load(path)
    validate(path, text, ops, options_file, ops_dir)
    for name, op in ops.items():
        extra = "meson" if os.path.isfile(os.path.join(ops_dir, name, "meson.build")) else ""
        tune = ",".join(f"{k.upper()}={v}" for k, v in op.get("tune", {}).items())
        deps = ";".join(f"{b}:{','.join(libs)}" for b, libs in op.get("deps", {}).items() if libs)
        print(f"{name}|{','.join(op['backends'])}|{extra}|{tune}|{deps}")


def c_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def c_list(items):
    return "{" + ", ".join(c_str(i) for i in items) + "}"


def c_shapes(shapes):
    return "{" + ", ".join("{" + ", ".join(str(v) for v in s) + "}" for s in shapes) + "}"


def c_pairs(d):
    return "{" + ", ".join("{" + c_str(k) + ", " + repr(float(v)) + "}" for k, v in d.items()) + "}"


def c_double(v):
    if v == float("inf"):
        return "std::numeric_limits<double>::infinity()"
    if v == float("-inf"):
        return "-std::numeric_limits<double>::infinity()"
    return repr(float(v))


ROLE = {"in": "Role::in", "out": "Role::out", "inout": "Role::inout"}


def c_arg(a):
    if a["dtype"] == "T":
        rule, fixed = "DTypeRule::storage", "DType::f32"
    elif a["dtype"] == "acc":
        rule, fixed = "DTypeRule::acc", "DType::f32"
    else:
        rule, fixed = "DTypeRule::fixed", f"DType::{a['dtype']}"
    return (f"ArgInfo{{{c_str(a['name'])}, {ROLE[a['role']]}, {rule}, {fixed}, "
            f"{'true' if a['list'] else 'false'}, {'true' if a['view'] else 'false'}, {c_str(a['shape'])}}}")


def c_param(pname, p):
    t = p["type"]
    ptype = {"f64": "ParamType::f64", "i64": "ParamType::i64", "bool": "ParamType::boolean", "enum": "ParamType::enumeration"}[t]
    inf = float("inf")
    if t == "bool":
        d, lo, hi, lo_open, hi_open = float(p["default"]), 0.0, 1.0, False, False
    elif t == "enum":
        d, lo, hi, lo_open, hi_open = float(p["choices"].index(p["default"])), 0.0, float(len(p["choices"]) - 1), False, False
    else:
        d = float(p["default"])
        lo, lo_open = (float(p["above"]), True) if "above" in p else (float(p.get("min", -inf)), False)
        hi, hi_open = (float(p["below"]), True) if "below" in p else (float(p.get("max", inf)), False)
    s_lo, s_hi = p.get("sample", [lo, hi])
    return (f"ParamInfo{{{c_str(pname)}, {ptype}, {c_double(d)}, {c_double(lo)}, {c_double(hi)}, "
            f"{'true' if lo_open else 'false'}, {'true' if hi_open else 'false'}, {c_double(s_lo)}, {c_double(s_hi)}, "
            f"{c_list(p.get('choices', []))}, {c_str(p.get('doc', ''))}, "
            f"{{{', '.join(c_double(v) for v in p.get('sweep', []))}}}, {c_list(p.get('jit_variant', []))}, "
            f"{{{', '.join(c_double(v) for v in p.get('jit_values', []))}}}}}")


def cmd_header(path, out, specs):
    text, ops = load(path)
    validate(path, text, ops)
    enabled = []
    for spec in specs:
        name, backends, prebuilt, launch = (spec.split(":") + ["", "", ""])[:4]
        if name not in ops:
            fail(path, 1, f"op '{name}' enabled by Meson but missing from the manifest")
        enabled.append((name, [b for b in backends.split(",") if b], [b for b in prebuilt.split(",") if b], launch == "launch"))
    lines = [
        "// Generated by kernels/tools/manifest.py from kernels/manifest.toml. Do not edit.",
        "#pragma once",
        "#include <limits>",
        "#include \"opforge/manifest.h\"",
        "",
        "namespace opf::ops {",
    ]
    for name, _, _, _ in enabled:
        lines.append(f"extern const OpSpec {name}_spec;")
    lines += ["}  // namespace opf::ops", "", "namespace opf::generated {", "",
              "inline std::vector<OpInfo> make_op_table() {", "  std::vector<OpInfo> t;"]
    for name, backends, prebuilt, launch in enabled:
        op = ops[name]
        entries = ", ".join("EntryInfo{" + c_str(e) + ", {" + ", ".join(c_arg(parse_arg(a)) for a in args) + "}}"
                            for e, args in op["entries"].items())
        params = ", ".join(c_param(k, v) for k, v in op.get("params", {}).items())
        deps = ", ".join("{" + c_str(b) + ", " + c_list(libs) + "}" for b, libs in op.get("deps", {}).items())
        lines += [
            "  t.push_back(OpInfo{",
            f"      .name = {c_str(name)},",
            f"      .summary = {c_str(op['summary'])},",
            f"      .entries = {{{entries}}},",
            f"      .dtypes = {c_list(op['dtypes'])},",
            f"      .declared_backends = {c_list(op['backends'])},",
            f"      .enabled_backends = {c_list(backends)},",
            f"      .prebuilt_backends = {c_list(prebuilt)},",
            f"      .params = {{{params}}},",
            f"      .tune = {c_pairs(op.get('tune', {}))},",
            f"      .deps = {{{deps}}},",
            f"      .cases = {c_shapes(op['cases'])},",
            f"      .bench = {c_shapes(op.get('bench', []))},",
            f"      .peers = {c_list(op.get('peers', []))},",
            f"      .spec = &opf::ops::{name}_spec,",
            f"      .gpu_launcher = {'true' if launch else 'false'},",
            "  });",
        ]
    lines += ["  return t;", "}", "", "}  // namespace opf::generated", ""]
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, out)


def main(argv):
    if len(argv) >= 5 and argv[1] == "list":
        cmd_list(argv[2], argv[3], argv[4])
    elif len(argv) >= 4 and argv[1] == "header":
        cmd_header(argv[2], argv[3], argv[4:])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
