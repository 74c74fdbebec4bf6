"""The order in which ``make test`` hands tests to its workers: the long ones first, shared out.

pytest-xdist's ``worksteal`` scheduler gives the first half of the collection to one worker and the second
half to the other, then lets an idle worker take tests from the *end* of a busy one's queue. A test of
four minutes met late in a queue therefore runs alone at the end while the other core idles (a fresh
``make test`` on 2 quiet cores used 1.26 of them). Here the collection is reordered so that the known long
tests open both halves, in turn, longest first (longest-processing-time scheduling), and the short tests
fill the queues' ends, where stealing balances them.

The durations are a hint, not a claim: ``tests/durations.json`` (test id → seconds of one quiet run,
tests of at least ``MIN_SECONDS``) is written by ``benchmarks/bench_build.py --durations`` from a JUnit
file. A test it does not know counts as short and keeps its place among the short ones, so a stale file
only costs time, never a test; the order is the same in every worker (xdist checks that the
collections agree).
"""
from __future__ import annotations

import json
from pathlib import Path

DURATIONS = Path(__file__).with_name("durations.json")
#: Tests shorter than this are left where they are (they balance through stealing).
MIN_SECONDS = 2.0


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """``{test id: seconds}`` of the file; ``{}`` when it is missing or unreadable (the order is then
    pytest's own)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and v >= MIN_SECONDS}


def longest_first_shared(ids: list[str], seconds: dict[str, float], workers: int = 2) -> list[int]:
    """A permutation of ``range(len(ids))``: the known long tests (``seconds``) longest first, each put in
    the one of the ``workers`` contiguous blocks xdist's worksteal makes of the collection that has the
    least known time so far, each block then filled with the short tests in their given order.

    With ``workers == 1`` (no xdist) it is the longest first, then the rest in order.
    """
    workers = max(1, int(workers))
    long_ = sorted((i for i, t in enumerate(ids) if t in seconds), key=lambda i: (-seconds[ids[i]], i))
    short = [i for i, t in enumerate(ids) if t not in seconds]
    n = len(ids)
    # the block sizes worksteal makes: pending // nodes_remaining, in order
    sizes, left = [], n
    for k in range(workers):
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    blocks: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in long_:  # each long test to the block with the least known time so far that has room
        k = min((b for b in range(workers) if len(blocks[b]) < sizes[b]), key=lambda b: (load[b], b))
        blocks[k].append(i)
        load[k] += seconds[ids[i]]
    it = iter(short)
    for b, size in zip(blocks, sizes):
        while len(b) < size:
            b.append(next(it))
    return [i for b in blocks for i in b]
