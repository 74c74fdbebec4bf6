"""The order ``make test`` hands tests to its workers (tests/schedule.py): a permutation, long tests first
and shared between the blocks xdist's worksteal makes, and a hint file that names real tests."""
import json
import random

import pytest

from schedule import DURATIONS, MIN_SECONDS, longest_first_shared, read_durations


def _blocks(order, workers):
    """The contiguous blocks worksteal gives each worker (pending // nodes_remaining, in order)."""
    out, left, start = [], len(order), 0
    for k in range(workers):
        size = left // (workers - k)
        out.append(order[start:start + size])
        start, left = start + size, left - size
    return out


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_the_order_is_a_permutation_with_the_long_tests_first_in_every_block(workers):
    rng = random.Random(workers)
    for _ in range(200):
        n = rng.randint(0, 60)
        ids = [f"t{i}" for i in range(n)]
        seconds = {t: rng.uniform(2, 300) for t in ids if rng.random() < 0.3}
        order = longest_first_shared(ids, seconds, workers)
        assert sorted(order) == list(range(n))
        for block in _blocks(order, workers):
            known = [seconds[ids[i]] for i in block if ids[i] in seconds]
            # the long tests open the block, longest first; the short ones keep their given order
            assert [ids[i] in seconds for i in block] == sorted([ids[i] in seconds for i in block], reverse=True)
            assert known == sorted(known, reverse=True)
            short = [i for i in block if ids[i] not in seconds]
            assert short == sorted(short)


def test_long_tests_are_shared_so_neither_worker_waits_for_the_other():
    # four searches of ~240 s and four tests of ~30-150 s, among 300 short ones: in collection order
    # (all eight in one file near the end) one worker's block would hold all of them
    ids = [f"s{i}" for i in range(280)] + [f"long{i}" for i in range(8)] + [f"s{i}" for i in range(280, 300)]
    seconds = dict(zip([f"long{i}" for i in range(8)], [260, 238, 232, 228, 148, 95, 78, 41]))
    blocks = _blocks(longest_first_shared(ids, seconds, 2), 2)
    loads = [sum(seconds.get(ids[i], 0) for i in b) for b in blocks]
    assert abs(loads[0] - loads[1]) <= 41, loads  # within the shortest long test
    naive = _blocks(list(range(len(ids))), 2)
    naive_loads = [sum(seconds.get(ids[i], 0) for i in b) for b in naive]
    assert max(naive_loads) == sum(seconds.values())  # what the reorder removes: all in the second block


def test_one_worker_gets_the_longest_first_then_the_rest_in_order():
    ids = ["a", "b", "c", "d"]
    assert longest_first_shared(ids, {"c": 5.0, "b": 9.0}, 1) == [1, 2, 0, 3]


def test_a_missing_or_broken_hint_file_leaves_the_order_alone(tmp_path):
    assert read_durations(tmp_path / "none.json") == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert read_durations(bad) == {}
    bad.write_text("[1, 2]")
    assert read_durations(bad) == {}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"x": MIN_SECONDS / 2, "y": 10, "z": "slow"}))
    assert read_durations(good) == {"y": 10.0}
    ids = ["p", "q"]
    assert longest_first_shared(ids, read_durations(tmp_path / "none.json"), 2) == [0, 1]


def test_the_committed_hint_names_test_files_that_exist():
    data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    assert len(data) >= 20, "tests/durations.json lists too few tests to order the suite"
    root = DURATIONS.parents[1]
    missing = sorted({k.split("::")[0] for k in data if not (root / k.split("::")[0]).is_file()})
    assert not missing, ("tests/durations.json names files that are gone "
                         f"(refresh it: bench_build.py --durations): {missing}")
