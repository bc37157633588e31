#!/usr/bin/env python3
"""Where a training step's device time goes between kernels, from libkernel_timeline.so's output.

Usage: scripts/kernel_timeline.py TIMELINE[.gz] [--steps N]
Steps are cut at each cross-entropy kernel (one a micro-batch); for the last N whole steps it prints the span
from the first piece of work to the last, the time some stream was busy, the idle rest, and, for the last
step, the idle gaps by length, the small memsets with the idle beside them, and the kernels by time. A
kernel's time is split three ways: its whole duration; the time it ran alone on the device; and its share of
the time it ran beside other work (each instant divided among the records running then). Alone plus share
adds up to the busy time, so a kernel stretched by running beside a GEMM on another stream no longer
counts as if it had the device to itself.
"""
import argparse
import collections
import gzip
import re


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    records = []
    with opener(path, "rt") as f:
        for line in f:
            kind, start, end, stream, a, b, name = line.rstrip("\n").split(" ", 6)
            records.append((kind, int(start), int(end), int(stream), int(a), int(b), name))
    return sorted(records, key=lambda r: r[1])


def busy_and_gaps(step):
    """The time some stream was busy, and each idle gap (ns) with the work that ended before it and the work
    after it."""
    intervals = sorted((r[1], r[2], r) for r in step)
    busy, gaps = 0, []
    start, end, ender = intervals[0][0], intervals[0][1], intervals[0][2]
    for a, b, r in intervals[1:]:
        if a > end:
            busy += end - start
            gaps.append((a - end, ender, r))
            start, end, ender = a, b, r
        elif b > end:
            end, ender = b, r
    return busy + end - start, gaps


def attributed(step):
    """Per record index: (ns alone on the device, ns of shared time divided among the records running then)."""
    events = sorted([(r[1], 1, i) for i, r in enumerate(step)] + [(r[2], -1, i) for i, r in enumerate(step)])
    alone, shared = collections.Counter(), collections.Counter()
    active, last = set(), None
    for t, kind, i in events:
        if active and last is not None and t > last:
            if len(active) == 1:
                alone[next(iter(active))] += t - last
            else:
                for j in active:
                    shared[j] += (t - last) / len(active)
        if kind == 1:
            active.add(i)
        else:
            active.discard(i)
        last = t
    return alone, shared


def short(name):
    return re.sub(r"^_Z\w*?(zb4cuda|cudnn6fusion)\d+", "", name)[:70]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    records = read(args.timeline)
    cuts = [i for i, r in enumerate(records) if r[0] == "K" and "cross_entropy" in r[6]]
    if len(cuts) < 2:
        raise SystemExit("fewer than two cross-entropy kernels: no whole step in the timeline")
    steps = [records[a:b] for a, b in zip(cuts[:-1], cuts[1:])][-args.steps:]
    for step in steps:
        span = step[-1][2] - step[0][1]
        busy, gaps = busy_and_gaps(step)
        counts = collections.Counter(r[0] for r in step)
        print(f"step: span {span / 1e6:.3f} ms, busy {busy / 1e6:.3f}, idle {(span - busy) / 1e6:.3f} in "
              f"{len(gaps)} gaps; {counts['K']} kernels, {counts['S']} memsets, {counts['C']} copies")
    step = steps[-1]
    _, gaps = busy_and_gaps(step)
    by_length = collections.Counter(min(g // 1000, 20) for g, _, _ in gaps)
    print("idle gaps by length (us, 20 = 20 or more):", dict(sorted(by_length.items())))
    small = [r for r in step if r[0] == "S" and r[4] <= 64]
    # The idle gaps just before or just after a small memset: what the memsets between kernels cost beyond their
    # own duration.
    small_ids = {id(r) for r in small}
    beside = sum(g for g, before, after in gaps if id(before) in small_ids or id(after) in small_ids)
    print(f"memsets of 64 bytes or less: {len(small)}, {sum(r[2] - r[1] for r in small) / 1e3:.1f} us, "
          f"idle beside them {beside / 1e3:.1f} us")
    alone, shared = attributed(step)
    totals = collections.defaultdict(lambda: [0, 0, 0.0, 0])
    for i, r in enumerate(step):
        key = f"{r[0]} {short(r[6])}" if r[0] == "K" else f"{r[0]} {r[4]} bytes"
        totals[key][0] += r[2] - r[1]
        totals[key][1] += alone[i]
        totals[key][2] += shared[i]
        totals[key][3] += 1
    print("    whole    alone    share (ms)  count  kernel")
    for key, (whole, by_itself, share, count) in sorted(totals.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:25]:
        print(f"{whole / 1e6:9.3f} {by_itself / 1e6:8.3f} {share / 1e6:8.3f}  {count:6d}x  {key}")


if __name__ == "__main__":
    main()
