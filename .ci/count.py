#!/usr/bin/env python3
"""Count test cases in meson test logs: every TAP line of a TAP test, or
the test itself otherwise; and in plain TAP outputs given with --tap FILE
(a missing file counts as a failure). Prints 'N passed, N failed'."""
import json
import re
import sys

args = sys.argv[1:]
passed = failed = 0
if args[:1] == ["--extra-failed"]:
    failed = int(args[1])
    args = args[2:]
while args[:1] == ["--tap"]:
    try:
        with open(args[1], encoding="utf-8", errors="replace") as f:
            out = f.read()
        # "not ok ... # TODO": an expected failure, counted as passed.
        todo = len(re.findall(r"^not ok\b.*# TODO", out, re.M))
        oks = len(re.findall(r"^ok\b", out, re.M)) + todo
        not_oks = len(re.findall(r"^not ok\b", out, re.M)) - todo
        passed += oks
        failed += not_oks + (0 if oks + not_oks else 1)
    except OSError:
        failed += 1
    args = args[2:]
for path in args:
    with open(path, encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)
            out = t.get("stdout") or ""
            todo = len(re.findall(r"^not ok\b.*# TODO", out, re.M))
            oks = len(re.findall(r"^ok\b", out, re.M)) + todo
            not_oks = len(re.findall(r"^not ok\b", out, re.M)) - todo
            good = t.get("result") in ("OK", "EXPECTEDFAIL")
            if oks + not_oks == 0:
                passed += good
                failed += not good
            else:
                passed += oks
                # A crashed or timed-out suite counts as a failure too.
                failed += not_oks + (0 if good or not_oks else 1)
print(f"{passed} passed, {failed} failed")
