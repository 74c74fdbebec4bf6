"""What the pool's size and cost rest on, read exactly: ``/proc/meminfo`` and ``sysconf`` (:func:`available_memory`),
the process's cgroups in every layout (:func:`_cgroup_memory_left`), the calibration matrix (:func:`_uniform_matrix`)
and the core share of the cost model (all of :mod:`bounds_lib.analysis.pool`).

The layouts of :func:`_cgroup_memory_left` that the stopping tests leave out: no ``/proc/self/cgroup`` (the
hierarchy's root, both versions), a unified hierarchy beside v1 controllers with a limit of its own, a group named
``unified`` under a plain v2 root, controllers listed together, a path with a colon, usage over the limit, and
v1's "no limit" (any value from 2^60 bytes on)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bounds_lib.analysis.pool as POOL

MB = 2**20


def _tree(tmp_path, files: dict, own: str | None) -> tuple:
    """A cgroup hierarchy under ``tmp_path/cg`` with ``files`` and, unless ``own`` is None, a /proc/self/cgroup."""
    root = tmp_path / "cg"
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    proc = tmp_path / "self-cgroup"
    if own is not None:
        proc.write_text(own)
    return root, proc


# --- the cgroups ---------------------------------------------------------------------------------


@pytest.mark.parametrize("files, left", [
    ({"memory.max": str(1000 * MB), "memory.current": str(400 * MB)}, 600 * MB),  # v2 at the root
    ({"memory/memory.limit_in_bytes": str(500 * MB), "memory/memory.usage_in_bytes": str(100 * MB)}, 400 * MB),  # v1
    ({"memory.max": str(1000 * MB), "memory.current": str(400 * MB),  # both: the least room left
      "memory/memory.limit_in_bytes": str(500 * MB), "memory/memory.usage_in_bytes": str(100 * MB)}, 400 * MB),
    ({"memory.max": str(1000 * MB), "memory.current": str(300 * MB),
      "memory/memory.limit_in_bytes": str(900 * MB), "memory/memory.usage_in_bytes": str(100 * MB)}, 700 * MB),
    ({}, None),
])
def test_without_proc_self_cgroup_the_roots_of_both_versions_are_read(tmp_path, files, left):
    root, proc = _tree(tmp_path, files, own=None)
    assert not proc.exists()
    assert POOL._cgroup_memory_left(root, proc) == left


def test_a_hybrid_layout_reads_the_unified_hierarchy_under_unified(tmp_path):
    root, proc = _tree(tmp_path, {
        "unified/box/memory.max": str(700 * MB), "unified/box/memory.current": str(200 * MB),
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "1",
        "box/memory.max": str(50 * MB), "box/memory.current": "0"}, "0::/box\n")  # a decoy where v2 would be alone
    assert POOL._cgroup_memory_left(root, proc) == 500 * MB


def test_a_group_named_unified_under_a_plain_v2_root_is_only_a_group(tmp_path):
    # no memory/ folder beside it: this is not the hybrid layout, so the process's group is read at the root
    root, proc = _tree(tmp_path, {"unified/box/memory.max": str(50 * MB), "unified/box/memory.current": "0",
                                  "box/memory.max": str(700 * MB), "box/memory.current": str(200 * MB)}, "0::/box\n")
    assert POOL._cgroup_memory_left(root, proc) == 500 * MB


@pytest.mark.parametrize("own, files", [
    ("0::/job:7/step\n", {"job:7/memory.max": str(600 * MB), "job:7/memory.current": str(100 * MB)}),
    ("0::/Xbox\n", {"Xbox/memory.max": str(600 * MB), "Xbox/memory.current": str(100 * MB)}),
    ("5:cpu,memory:/Xbox\n", {"memory/Xbox/memory.limit_in_bytes": str(600 * MB),
                              "memory/Xbox/memory.usage_in_bytes": str(100 * MB)}),
    ("7:blkio:/io\n5:memory,hugetlb:/box\n", {"memory/box/memory.limit_in_bytes": str(600 * MB),
                                             "memory/box/memory.usage_in_bytes": str(100 * MB)}),
])
def test_the_process_line_is_parsed_field_by_field(tmp_path, own, files):
    """``hierarchy:controllers:path`` — the path may hold a colon and begin with any letter; the memory
    controller may share its hierarchy with others."""
    root, proc = _tree(tmp_path, files, own)
    assert POOL._cgroup_memory_left(root, proc) == 500 * MB


def test_only_hierarchy_0_without_controllers_is_the_unified_one(tmp_path):
    # hierarchy 3 with an empty controller list is no v2 line: its group's memory.max is not read
    root, proc = _tree(tmp_path, {"other/memory.max": str(600 * MB), "other/memory.current": "0"}, "3::/other\n")
    assert POOL._cgroup_memory_left(root, proc) is None


@pytest.mark.parametrize("limit, usage, left", [
    (100 * MB, 300 * MB, 0),             # over its limit (reclaim pending): no room, not a negative one
    (2**60 - 1, 0, 2**60 - 1),           # below 2^60 bytes: a limit
    (2**60, 0, None),                    # from 2^60 bytes on: v1's "no limit" (9223372036854771712)
    (2**60 + 2**59, 0, None),
])
def test_usage_over_the_limit_and_v1s_no_limit(tmp_path, limit, usage, left):
    root, proc = _tree(tmp_path, {"memory/box/memory.limit_in_bytes": str(limit),
                                  "memory/box/memory.usage_in_bytes": str(usage)}, "4:memory:/box\n")
    assert POOL._cgroup_memory_left(root, proc) == left


# --- /proc/meminfo, sysconf, and the cgroup over them ------------------------------------------------


@pytest.fixture
def meminfo(tmp_path, monkeypatch):
    """Redirect the module's ``/proc/meminfo`` to a file the test writes (absent until written)."""
    f = tmp_path / "meminfo"
    monkeypatch.setattr(POOL, "Path", lambda p: f if p == "/proc/meminfo" else Path(p))
    pages = {"SC_AVPHYS_PAGES": 10, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(POOL.os, "sysconf", lambda name: pages[name])
    monkeypatch.setattr(POOL, "_cgroup_memory_left", lambda: None)
    return f


def test_memavailable_is_read_in_kib(meminfo):
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:         1000 kB\nMemAvailable:    2048 kB\n")
    assert POOL.available_memory() == (2048 * 1024, "MemAvailable of /proc/meminfo")


@pytest.mark.parametrize("text", [None, "MemTotal:       16384 kB\nmemavailable:    2048 kB\n"])
def test_without_memavailable_the_free_pages_posix_reports(meminfo, text):
    if text is not None:
        meminfo.write_text(text)
    assert POOL.available_memory() == (10 * 4096, "sysconf(SC_AVPHYS_PAGES)")


def test_a_cgroup_tighter_than_the_machine_wins_and_an_equal_one_does_not(meminfo, monkeypatch):
    meminfo.write_text("MemAvailable:    1024 kB\n")
    monkeypatch.setattr(POOL, "_cgroup_memory_left", lambda: MB)
    assert POOL.available_memory() == (MB, "MemAvailable of /proc/meminfo")
    monkeypatch.setattr(POOL, "_cgroup_memory_left", lambda: MB - 1)
    assert POOL.available_memory() == (MB - 1, "the cgroup's memory limit less its usage")


def test_with_neither_meminfo_nor_sysconf_a_cgroup_limit_still_counts(meminfo, monkeypatch):
    monkeypatch.setattr(POOL.os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    monkeypatch.setattr(POOL, "_cgroup_memory_left", lambda: 300 * MB)
    assert POOL.available_memory() == (300 * MB, "the cgroup's memory limit less its usage")


# --- the calibration matrix and the core share --------------------------------------------------------


def _splitmix64(i: int) -> int:
    """SplitMix64's output for the state ``i + γ`` (Steele, Lea & Flood 2014), in Python integers."""
    mask = 2**64 - 1
    z = (i + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_the_calibration_matrix_is_splitmix64_of_the_indices():
    # SplitMix64 seeded with 0 first returns 0xE220A8397B1DCDAF (the reference implementation's first output)
    assert _splitmix64(0) == 0xE220A8397B1DCDAF
    A = POOL._uniform_matrix(3, 5)
    want = np.array([(_splitmix64(i) >> 11) / 2.0**53 - 0.5 for i in range(15)]).reshape(3, 5)
    assert A.dtype == np.float64 and A.shape == (3, 5)
    np.testing.assert_array_equal(A, want)  # exact: 53-bit integers over a power of two


def test_the_calibration_matrix_is_uniform_on_minus_half_to_half_and_full_rank():
    A = POOL._uniform_matrix(512, 256)
    assert -0.5 <= A.min() < -0.49 and 0.49 < A.max() < 0.5
    assert abs(A.mean()) < 0.01 and abs(A.var() - 1 / 12) < 0.002  # U(-1/2, 1/2): variance 1/12
    assert np.linalg.matrix_rank(A) == 256


@pytest.mark.parametrize("runnable, cores, share",
                         [(0, 2, 1.0), (-1.0, 2, 1.0), (1, 2, 1.0), (4, 2, 0.5), (3, 2, 2 / 3)])
def test_the_core_share_is_at_most_one_core_and_one_with_nothing_runnable(runnable, cores, share):
    assert POOL._core_share(runnable, cores) == share


def test_the_rate_is_reported_in_gflops_at_any_size(monkeypatch):
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    _, cost = POOL.plan_pool(1e9, 2, rate=(1e17, "r"), start=(0.5, "s"), busy=0.0)
    assert cost["svd_rate_GFLOPs"] == 1e8


@pytest.mark.parametrize("affinity, cpu_count, cores",
                         [({0, 1, 2}, 8, 3), (set(), 8, 1), (None, 3, 3), (None, None, 1)])
def test_cores_are_the_affinity_else_the_cpu_count_and_at_least_one(monkeypatch, affinity, cpu_count, cores):
    if affinity is None:  # not Linux: no sched_getaffinity
        monkeypatch.delattr(POOL.os, "sched_getaffinity", raising=False)
    else:
        monkeypatch.setattr(POOL.os, "sched_getaffinity", lambda pid: affinity)
    monkeypatch.setattr(POOL.os, "cpu_count", lambda: cpu_count)
    assert POOL._cores() == cores


# --- where the machine record lives ------------------------------------------------------------------


def test_the_machine_record_lives_in_the_xdg_cache_else_in_home_dot_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("BOUNDS_LIB_MACHINE_RECORD", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert POOL._machine_file() == tmp_path / "xdg" / "bounds-lib" / "machine.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert POOL._machine_file() == tmp_path / "home" / ".cache" / "bounds-lib" / "machine.json"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # set but empty: as if unset (the XDG rule)
    assert POOL._machine_file() == tmp_path / "home" / ".cache" / "bounds-lib" / "machine.json"
    monkeypatch.setenv("BOUNDS_LIB_MACHINE_RECORD", str(tmp_path / "mine.json"))
    assert POOL._machine_file() == tmp_path / "mine.json"


def test_the_median_is_numpys_bit_for_bit():
    """``_median`` (the pool's decision and the report's standouts, without importing ``numpy.ma``) against
    ``np.median`` on odd and even counts, ties, negative and huge values, one value, and NaN; an empty input
    raises."""
    import math

    from bounds_lib.analysis.pool import _median

    def numpy_median(x):
        with np.errstate(over="ignore"):  # two values near the float64 limit: their mean overflows both ways
            return float(np.median(x))

    rng = np.random.default_rng(52)
    for n in list(range(1, 12)) + [100, 101]:
        for draw in (rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300), rng.integers(0, 4, n),
                     np.full(n, 0.1)):
            assert _median(draw) == numpy_median(draw)
            assert _median(draw.tolist()) == numpy_median(draw)
    assert _median([1e308, 1e308]) == numpy_median([1e308, 1e308]) == math.inf
    assert _median([0.1, 0.2]) == numpy_median([0.1, 0.2]) != 0.15
    assert math.isnan(_median([1.0, math.nan, 2.0])) and math.isnan(numpy_median([1.0, math.nan, 2.0]))
    with pytest.raises(ValueError, match="^the median of no values$"):
        _median([])
