#!/usr/bin/env python3
"""count-tests.py - sum the test cases of meson test logs into one line.

A Check program reports "Checks: N, Failures: F, Errors: E"; its cases are
counted one by one, and each case the harness did not run because the device
under test lacks what it needs ("SKIP case: reason", tests/harness.h) counts
as skipped. Any other test counts as one case. A Check program that
died before its summary counts as one failure, so a partial run can never
look green. A JUnit XML file (pytest --junitxml, or tests/fuzz/run.sh's one
case a fuzz target) adds its cases: failures and errors fail, skips skip; a
missing or unreadable one counts as one failure. Prints "N passed, N
failed[, N skipped]" and exits 1 on failure.
"""
import json
import re
import sys
import xml.etree.ElementTree as ET

SUMMARY = re.compile(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)")
SKIP = re.compile(r"^SKIP \S+: ", re.M)

passed = failed = skipped = 0
for path in sys.argv[1:]:
    if path.endswith(".xml"):
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"count-tests: {path}: {e}", file=sys.stderr)
            failed += 1
            continue
        suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
        n = 0
        for suite in suites:
            for case in suite.iter("testcase"):
                n += 1
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
        if n == 0:
            failed += 1     # a run that collected nothing
        continue
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        print(f"count-tests: {path}: {e}", file=sys.stderr)
        failed += 1
        continue
    if not lines:
        failed += 1
    for line in lines:
        t = json.loads(line)
        result = t.get("result")
        m = SUMMARY.search(t.get("stdout") or "")
        if result == "SKIP":
            skipped += 1
            continue
        skipped += len(SKIP.findall(t.get("stdout") or ""))
        if m:
            n, f, e = (int(x) for x in m.groups())
            passed += n - f - e
            failed += f + e
            if result != "OK" and f + e == 0:
                failed += 1     # the program failed after its summary
        elif result == "OK":
            passed += 1
        else:
            failed += 1

line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed else 0)
