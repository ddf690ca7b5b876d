#!/usr/bin/env python3
"""Collects a fuzz target's seed inputs from the repository's own test data into one directory
(libFuzzer reads a corpus per directory). Gzip'd files are stored decompressed: the fuzzer should
mutate the format, not the compression. Usage: seeds.py OUT_DIR GLOB... (globs relative to the
source root; a glob that matches nothing is an error, so a moved data folder is noticed)."""
import glob
import gzip
import hashlib
import os
import sys

MAX_SEED_BYTES = 256 << 10  # larger files slow every mutation; the small ones cover the syntax


def main():
    out, patterns = sys.argv[1], sys.argv[2:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(out, exist_ok=True)
    for pattern in patterns:
        paths = sorted(glob.glob(os.path.join(root, pattern), recursive=True))
        if not paths:
            sys.exit(f"fuzz/seeds.py: {pattern}: no file matches (seed data moved?)")
        for path in paths:
            with open(path, "rb") as f:
                data = f.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            if len(data) > MAX_SEED_BYTES:
                continue
            name = hashlib.sha256(data).hexdigest()[:16] + "-" + os.path.basename(path).removesuffix(".gz")
            tmp = os.path.join(out, "." + name)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(out, name))


if __name__ == "__main__":
    main()
