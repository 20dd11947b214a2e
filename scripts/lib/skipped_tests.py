#!/usr/bin/env python3
"""Lists the tests the last ctest run skipped, with the reason each printed, and fails
when any skipped for a reason other than missing hardware.

scripts/test installs every package the tests use (scripts/packages/test.txt), so a test
that skips because software is missing (PyTorch, Chromium, protoc, MPI) means the
oracle it would have run did not, and CI must not pass it. Only a skip whose reason
starts with "hardware: " (no CUDA device, fewer than 2 GPUs, a CPU without an
instruction set) may pass: those cannot be mended by installing anything.

  scripts/lib/skipped_tests.py BUILD_DIR
Reads BUILD_DIR/Testing/Temporary/LastTest.log (written by ctest, every test's output).
"""
import os
import re
import sys

HARDWARE = "hardware: "


def parse_log(path):
    """Yields (test name, completion status, output) for each test in ctest's log."""
    with open(path, errors="replace") as f:
        text = f.read()
    for block in re.split(r"\n(?=\d+/\d+ Testing: )", text):
        header = re.match(r"\d+/\d+ Testing: (.+)", block)
        if not header:
            continue
        output = block.split("Output:\n" + "-" * 58 + "\n", 1)
        body = output[1].split("<end of output>", 1)[0] if len(output) == 2 else ""
        status = re.search(r"\nTest (Passed|Failed|Skipped|Not Run)\.?", block)
        skipped = "\n\"" + header.group(1) + "\" end time" in block and re.search(
            r"Test Skipped|SKIP_REGULAR_EXPRESSION_MATCHED|Skip(ped)? regular expression found", block)
        yield header.group(1).strip(), ("Skipped" if skipped else (status.group(1) if status else "?")), body


def reason_of(output):
    """GoogleTest prints 'file:line: Skipped' then the message; scripts print 'SKIP: ...'."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.search(r":\d+: Skipped$", line):
            message = []
            for follow in lines[i + 1:]:
                if not follow.strip() or follow.startswith("[  SKIPPED ]"):
                    break
                message.append(follow.strip())
            return " ".join(message) or "(no reason printed)"
    for line in reversed(lines):
        if line.strip():
            return re.sub(r"^SKIP(PED)?:\s*", "", line.strip())
    return "(no reason printed)"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/lib/skipped_tests.py BUILD_DIR")
    log = os.path.join(sys.argv[1], "Testing", "Temporary", "LastTest.log")
    if not os.path.isfile(log):
        sys.exit(f"skipped_tests: {log} not found: run ctest first")
    skipped = [(name, reason_of(output)) for name, status, output in parse_log(log) if status == "Skipped"]
    hardware = [(n, r) for n, r in skipped if r.startswith(HARDWARE)]
    software = [(n, r) for n, r in skipped if not r.startswith(HARDWARE)]
    print(f"skipped tests: {len(skipped)} ({len(hardware)} for missing hardware, {len(software)} for anything else)")
    for name, reason in hardware + software:
        print(f"  {name}: {reason}")
    if software:
        print(f"skipped_tests: FAILED: {len(software)} test(s) skipped for a reason other than missing hardware "
              f"(install what they need through scripts/packages/test.txt):", file=sys.stderr)
        for name, reason in software:
            print(f"  {name}: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
