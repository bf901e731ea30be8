#!/usr/bin/env python3
"""The GPU check's test list: every test of a `ctest -V` log (or of the check's fallback log, blocks opened by
"==== NAME" and closed by "==== NAME exit RC") with its verdict, and every gtest case that skipped with its reason.

A skip for want of a GPU (none visible, or the runtime not on CUDA) fails the check; a skip for want of more GPUs
(NCCL needs one per rank: the np 2 and 4 registrations on one GPU) is listed but is not a pass; other skips (a case
that needs another rank count) are listed. The check passes only when nothing failed, nothing skipped for want of a
GPU, and at least one test ran and passed.

Usage: ctest_summary.py LOG [OUT_FILE]   (prints the list, writes it to OUT_FILE too; exit 0 on pass, 1 otherwise)
"""
import re
import sys

# Skip reasons, as the tests word them (tests/**/cuda, collectives/communicator_registry.cc nccl_gpu_shortage).
NO_GPU = re.compile(r"no CUDA device visible|no GPU visible|not on the CUDA backend|needs the CUDA backend")
MORE_GPUS = re.compile(r"NCCL needs one GPU per rank")

CTEST_RESULT = re.compile(
    r"^\s*\d+/\d+ Test\s+#(\d+): (\S+) \.*\s*(\*\*\*)?(Passed|Failed|Skipped|Not Run|Timeout|Exception\S*)"
)
CTEST_START = re.compile(r"^\s*Start\s+(\d+): (\S+)")
FALLBACK_OPEN = re.compile(r"^==== (\S+)$")
FALLBACK_CLOSE = re.compile(r"^==== (\S+) exit (\d+)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # gtest's colours


def gtest_skips(lines):
    """[(case, reason)] of the gtest cases in `lines` (one test's output) that skipped."""
    skips, reason, in_skip = [], [], False
    for line in lines:
        if re.search(r":\d+: Skipped$", line):
            in_skip, reason = True, []
            continue
        m = re.match(r"^\[  SKIPPED \] (\S+) \(", line)
        if m:
            skips.append((m.group(1), " ".join(r for r in reason if r).strip() or "(no reason given)"))
            in_skip = False
            continue
        if in_skip:
            reason.append(line.strip())
    return skips


def parse(text):
    """[(name, verdict, skips)] in log order; verdict passed, failed (with ctest's word) or skipped."""
    outputs, names, verdicts, order = {}, {}, {}, []
    current = None  # fallback format: the open block
    for raw in ANSI.sub("", text).splitlines():
        m = CTEST_START.match(raw)
        if m:
            names[m.group(1)] = m.group(2)
            if m.group(1) not in order:
                order.append(m.group(1))
            continue
        m = CTEST_RESULT.match(raw)
        if m:
            num, name, word = m.group(1), m.group(2), m.group(4)
            names[num] = name
            if num not in order:
                order.append(num)
            verdicts[num] = {"Passed": "passed", "Skipped": "skipped"}.get(word, f"failed ({word})")
            continue
        m = FALLBACK_CLOSE.match(raw)
        if m:
            rc = int(m.group(2))
            verdicts[m.group(1)] = "passed" if rc == 0 else "skipped" if rc == 77 else f"failed (exit {rc})"
            current = None
            continue
        m = FALLBACK_OPEN.match(raw)
        if m:
            current = m.group(1)
            names[current] = current
            order.append(current)
            continue
        m = re.match(r"^(\d+): (.*)$", raw)
        if m and m.group(1) in names and current is None:
            outputs.setdefault(m.group(1), []).append(m.group(2))
        elif current is not None:
            outputs.setdefault(current, []).append(raw)
    return [(names[k], verdicts.get(k, "failed (no result)"), gtest_skips(outputs.get(k, []))) for k in order]


def classify(reason):
    if NO_GPU.search(reason):
        return "no GPU"
    if MORE_GPUS.search(reason):
        return "needs more GPUs"
    return "other"


def summarise(tests):
    """(lines, counts, ok)"""
    lines, counts = [], {"passed": 0, "failed": 0, "skipped: no GPU": 0, "skipped: needs more GPUs": 0,
                         "skipped: other": 0}
    for name, verdict, skips in tests:
        kinds = {classify(reason) for _, reason in skips}
        if verdict == "passed":
            word = "ran, passed" + (f" ({len(skips)} case(s) skipped)" if skips else "")
            counts["passed"] += 1
            if "no GPU" in kinds:
                counts["skipped: no GPU"] += 1
                word += "; a case skipped for want of a GPU"
        elif verdict == "skipped":
            kind = ("no GPU" if "no GPU" in kinds or not kinds else
                    "needs more GPUs" if "needs more GPUs" in kinds else "other")
            counts[f"skipped: {kind}"] += 1
            word = f"skipped ({kind})"
        else:
            counts["failed"] += 1
            word = verdict
        lines.append(f"{name:<40} {word}")
        for case, reason in skips:
            lines.append(f"    skipped {case}: {reason}")
    ok = counts["failed"] == 0 and counts["skipped: no GPU"] == 0 and counts["passed"] > 0
    lines.append("tests: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v) + (" -> ok" if ok else " -> NOT ok"))
    return lines, counts, ok


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    with open(sys.argv[1], errors="replace") as f:
        tests = parse(f.read())
    lines, _, ok = summarise(tests)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
