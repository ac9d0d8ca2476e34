"""Summarise a py-spy raw profile (collapsed stacks) recorded by `turns.py --profile`.

    python bench/profile_summary.py bench/results/prof/pg-W3-web.txt [--top 25] [--match sessions.]

Prints, per process, the share of samples by inclusive frame (a function and
everything it calls) and by self frame (the leaf), so the top costs of a
workload can be read off without a flame-graph viewer.
"""
from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

IDLE = ("select (selectors.py", "poll (selectors.py", "epoll", "wait (threading.py", "_worker (concurrent",
        "get (queue.py", "sleep", "accept", "select (select")


def frames(stack: str) -> list[str]:
    # "process 123:"python ..."";frame (file.py:12);frame2 ... -> drop line numbers so a function is one key
    return [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default="", help="only count inclusive frames whose text contains this")
    args = parser.parse_args()
    inclusive: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in args.path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        fs = frames(stack)
        if any(p in fs[-1] for p in IDLE):
            idle += n
            continue
        total += n
        for f in set(fs[1:]):  # fs[0] is the process/thread label
            if args.match in f:
                inclusive[f] += n
        leaf[fs[-1]] += n
    print(f"{args.path.name}: {total} busy samples ({idle} idle samples left out)")
    print("inclusive:")
    for f, n in inclusive.most_common(args.top):
        print(f"  {n / total * 100:5.1f}%  {f[:150]}")
    print("self:")
    for f, n in leaf.most_common(args.top):
        print(f"  {n / total * 100:5.1f}%  {f[:150]}")


if __name__ == "__main__":
    main()
