"""book/tools/parallel_execution.py's settings: how many notebooks run at once and the kernels' threads.

The extension itself (notebooks executed in parallel into the jupyter-cache, each once, a failing
cell failing the build) is tested end to end on scratch books in tests/test_strict_build.py.
"""
import pytest

import parallel_execution as PE  # book/tools is on sys.path (conftest.py)


def test_jobs_default_to_one_per_core_and_never_exceed_the_notebooks(monkeypatch):
    monkeypatch.delenv("BOUNDS_NB_JOBS", raising=False)
    assert PE.jobs_for("auto", pending=10, cpus=2) == 2
    assert PE.jobs_for(0, pending=10, cpus=8) == 8
    assert PE.jobs_for("auto", pending=3, cpus=8) == 3
    assert PE.jobs_for(1, pending=10, cpus=8) == 1
    assert PE.jobs_for("4", pending=10, cpus=2) == 4  # an explicit number is taken as given


def test_the_environment_overrides_the_setting(monkeypatch):
    monkeypatch.setenv("BOUNDS_NB_JOBS", "1")
    assert PE.jobs_for("auto", pending=10, cpus=2) == 1
    monkeypatch.setenv("BOUNDS_NB_JOBS", "")
    assert PE.jobs_for("auto", pending=10, cpus=2) == 2
    monkeypatch.setenv("BOUNDS_NB_JOBS", "-1")
    with pytest.raises(ValueError, match="BOUNDS_NB_JOBS"):
        PE.jobs_for("auto", pending=10, cpus=2)


def test_kernels_get_one_thread_unless_the_environment_says_otherwise():
    env = PE.kernel_env({"PATH": "/bin", "OMP_NUM_THREADS": "3"})
    assert env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "3"
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"


def test_only_a_kernel_that_never_started_is_started_again():
    """nbclient's words for a kernel that died before its first reply (no cell ran); a kernel that dies
    later, or a raising cell, is a failure of the notebook."""
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    assert PE.kernel_never_started(RuntimeError("Kernel died before replying to kernel_info"))
    assert not PE.kernel_never_started(DeadKernelError("Kernel died"))
    assert not PE.kernel_never_started(CellExecutionError("x", "AssertionError", "a failing check"))
    assert PE.STARTS >= 2


def test_longest_notebooks_start_first_and_never_timed_ones_before_them():
    todo = [("a", "/x/a.md"), ("b", "/x/b.md"), ("c", "/x/c.md"), ("d", "/x/d.md")]
    order = PE.longest_first(todo, {"/x/a.md": 5.0, "/x/b.md": 60.0, "/x/d.md": 20.0})
    assert [d for d, _ in order] == ["c", "b", "d", "a"]


def test_the_history_keeps_earlier_times_drops_gone_notebooks_and_survives_a_broken_file(tmp_path, monkeypatch):
    monkeypatch.delenv("BOUNDS_NB_HISTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert PE.history_file() == tmp_path / "bounds-lib-book" / "execution_seconds.json"
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text("")
    b.write_text("")
    assert PE.read_history() == {}
    PE.write_history({str(a): 5.0})
    PE.write_history({str(b): 7.5})
    assert PE.read_history() == {str(a): 5.0, str(b): 7.5}
    a.unlink()
    PE.write_history({})
    assert PE.read_history() == {str(b): 7.5}
    PE.history_file().write_text("not json")
    assert PE.read_history() == {}
    monkeypatch.setenv("BOUNDS_NB_HISTORY", str(tmp_path / "h.json"))
    assert PE.history_file() == tmp_path / "h.json"
