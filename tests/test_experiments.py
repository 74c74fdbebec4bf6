"""bounds_lib.experiments, the old home of the grid, results and rank statistics, kept one release as re-exports.

The tests of the code itself moved with it: tests/test_grid.py, tests/test_results.py, tests/test_stats.py,
tests/test_scoring_single_head.py and tests/test_trained_report.py.
"""
import json
import os
import subprocess
import sys

from bounds_lib import experiments as E, grid, results, scoring, stats


def test_old_names_are_the_objects_of_their_new_homes():
    homes = (grid, results, stats, scoring)
    for name in E.__all__:
        obj = getattr(E, name)
        owners = [m for m in homes if getattr(m, name, None) is obj]
        if name == "MATRIX_TYPES":
            owners = [scoring] if obj is scoring.SINGLE_HEAD_MATRIX_TYPES else []
        assert owners, f"bounds_lib.experiments.{name} is not re-exported from its new module"
    # nothing is defined here any more: every public function's home is another module
    assert all(getattr(E, n).__module__ != "bounds_lib.experiments" for n in E.__all__
               if callable(getattr(E, n)))


def test_the_documented_command_still_runs(tmp_path):
    out = tmp_path / "g.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    proc = subprocess.run([sys.executable, "-m", "bounds_lib.experiments", "--out", str(out), "--preset", "study",
                           "--small", "--select", "seed=0", "n_train=16"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = results.read_results(out)
    assert data["metadata"]["command"].startswith("python -m bounds_lib.grid --out")
    assert data["metadata"]["n_rows"] == len(grid.grid_configs(grid.SMALL_STUDY_GRID)) // 2
    assert "training" not in proc.stderr  # TQDM_DISABLE=1: no progress bar
    assert json.loads(out.read_text())["rows"] == data["rows"]
