#!/usr/bin/env bash
# The GitHub Actions workflows lint clean (yamllint --strict with the repo's .yamllint), and every
# tools/ci/ script their steps run exists and is executable (the replay test runs those scripts).
# Usage: workflow_lint.sh SOURCE_ROOT
set -euo pipefail
cd "$1"
command -v yamllint >/dev/null || { echo "SKIP: yamllint not found (tools/setup.sh installs the Debian package)"; exit 77; }
yamllint --strict -c .yamllint .github/workflows/
# PyYAML comes with yamllint: use the Python it runs on (Debian's, whatever python3 is first on PATH)
py=$(sed -n '1s/^#! *//p' "$(command -v yamllint)")
[[ -x ${py%% *} ]] || py=python3
$py - .github/workflows/*.yml <<'PY'
import os, re, sys, yaml
bad = []
for path in sys.argv[1:]:
    doc = yaml.safe_load(open(path))
    for job, spec in doc["jobs"].items():
        for i, step in enumerate(spec.get("steps", [])):
            for script in re.findall(r"tools/ci/[\w.-]+", step.get("run", "")):
                if not os.access(script, os.X_OK):
                    bad.append(f"{path}: job {job} step {i + 1}: {script} is missing or not executable")
if bad:
    sys.exit("\n".join(bad))
PY
echo "workflows lint clean"
