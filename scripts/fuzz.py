"""Long fuzz run of the built-in passes on random graphs (tests/python/fuzzing.py).

    python scripts/fuzz.py --graphs 10000 [--start 0]

Prints a summary (graphs, failures by reason, time) and, for each failure, a minimal reproducer.
Exits non-zero if anything failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))

import fuzzing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--show", type=int, default=5, help="reproducers to print")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    began = time.perf_counter()
    failures = []
    for seed in range(args.start, args.start + args.graphs):
        failure = fuzzing.run_case(seed)
        if failure is not None:
            failures.append(failure)
            print(f"FAIL seed {seed}: {failure.reason.splitlines()[0]}", flush=True)
        done = seed - args.start + 1
        if done % 500 == 0:
            print(f"... {done} graphs, {len(failures)} failures, "
                  f"{time.perf_counter() - began:.0f} s", flush=True)
    elapsed = time.perf_counter() - began
    by_reason = collections.Counter(f.reason.splitlines()[0] for f in failures)
    print(f"\nfuzz summary: {args.graphs} graphs (seeds {args.start}..{args.start + args.graphs - 1}), "
          f"{len(failures)} failures, {elapsed:.0f} s")
    for reason, n in by_reason.most_common():
        print(f"  {n:5d}  {reason}")
    for failure in failures[: args.show]:
        print("\n" + fuzzing.report(failure))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
