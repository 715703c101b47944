#!/usr/bin/env python3
"""Count test cases in meson test logs: every TAP line of a TAP test, or
the test itself otherwise; and in plain TAP outputs given with --tap FILE
(a missing file counts as a failure). Prints what failed, each with the
last lines it printed (so the end of a long CI log names it), then
'N passed, N failed'."""
import json
import re
import sys

args = sys.argv[1:]
passed = failed = 0
failures = []  # (where, what, the last lines it printed)


def tail(text, n=12):
    return [l for l in (text or "").splitlines() if l.strip()][-n:]


def not_ok_lines(out, context=16):
    """Each failed case's line, then the diagnostics after it (its
    traceback), the last lines of them when long."""
    lines, found = out.splitlines(), []
    for i, l in enumerate(lines):
        if not l.startswith("not ok") or "# TODO" in l:
            continue
        notes = []
        for d in lines[i + 1:]:
            if d.startswith(("ok", "not ok")):
                break
            notes.append(d)
        found.append(l)
        if len(notes) <= context:
            found += notes
            continue
        # The lines that say where and what, then the end.
        key = [d for d in notes[:-8]
               if re.search(r"Error|Exception|[Aa]ssert|File \".*/tests/",
                            d)]
        found += key[-8:] + ["    ..."] + notes[-8:]
    return found
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
        if not_oks:
            failures.append((args[1], "%d cases" % not_oks,
                             not_ok_lines(out)))
        if not oks + not_oks:
            failures.append((args[1], "no TAP lines", tail(out)))
    except OSError:
        failed += 1
        failures.append((args[1], "missing", []))
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
            name = f"{t.get('name')} ({t.get('result')})"
            lines = tail(out) + tail(t.get("stderr"))
            if oks + not_oks == 0:
                passed += good
                failed += not good
                if not good:
                    failures.append((path, name, lines))
            else:
                passed += oks
                # A crashed or timed-out suite counts as a failure too.
                failed += not_oks + (0 if good or not_oks else 1)
                if not_oks or not good:
                    failures.append((path, name, not_ok_lines(out) or lines))
for where, what, lines in failures:
    print(f"FAILED in {where}: {what}")
    for l in lines:
        print(f"    {l[:300]}")
print(f"{passed} passed, {failed} failed")
