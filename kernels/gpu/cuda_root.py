#!/usr/bin/env python3
"""Print the CUDA toolkit root that a given nvcc really belongs to.

`nvcc` on PATH is often a wrapper script or symlink (/usr/local/bin/nvcc -> cuda-13.0), so the
toolkit cannot be found from nvcc's own path. nvcc's dry run prints the TOP it resolved for
itself; that directory must hold include/cuda.h, which the host side of the CUDA backend needs.
Exit 1 with a one-line reason when it cannot be determined.
"""
import os
import subprocess
import sys


def main() -> int:
    nvcc = sys.argv[1]
    try:
        run = subprocess.run([nvcc, '--dryrun', '-c', '-x', 'cu', os.devnull, '-o', os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print(f'{nvcc}: cannot run: {e}', file=sys.stderr)
        return 1
    top = None
    for line in (run.stderr + run.stdout).splitlines():
        if line.startswith('#$ TOP='):
            top = line[len('#$ TOP='):].strip()
    if not top:
        print(f'{nvcc}: its --dryrun output names no TOP directory', file=sys.stderr)
        return 1
    root = os.path.realpath(top)
    if not os.path.isfile(os.path.join(root, 'include', 'cuda.h')):
        print(f'{nvcc}: toolkit root {root} has no include/cuda.h', file=sys.stderr)
        return 1
    print(root)
    return 0


if __name__ == '__main__':
    sys.exit(main())
