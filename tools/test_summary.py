#!/usr/bin/env python3
"""Counts test cases in Meson JUnit logs (GoogleTest cases are expanded when a test uses
protocol: 'gtest') and prints `N passed, N failed, N skipped`; exit 1 if any failed."""
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"{path}: cannot read test log: {e}", file=sys.stderr)
        failed += 1
        continue
    for suite in root.iter("testsuite"):
        # Meson writes one <testsuite> per test with subtests, and a flat one for plain tests
        for case in suite.findall("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                print(f"FAILED: {suite.get('name')} {case.get('classname', '')}.{case.get('name')}", file=sys.stderr)
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
