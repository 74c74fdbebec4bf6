"""Committed rows regenerate on this machine within the measured tolerance, bit for bit twice, and the
check has power against the smallest changes that matter; another CPU simulated in a subprocess
(bounds_lib.studies.reproduce). These tests train models (a few seconds each)."""
import json
import math
import os
import subprocess
import sys

import pytest

from bounds_lib.studies import reproduce as P
from bounds_lib.studies import training as TR
from bounds_lib.studies.grid import run_config
from bounds_lib.studies.training import TrainConfig

TABLE = P.load_tolerances()


def _first_reference(name):
    return P.reference_rows(name)[0]


@pytest.mark.parametrize("name", ["trained_grid", "common_loss", "study"])
def test_reference_row_regenerates_within_tolerance_and_bit_for_bit_twice(name):
    row = _first_reference(name)
    first, second = P.regenerate(row), P.regenerate(row)
    assert P.bitwise_equal(first, second)  # the same machine, the same thread count: bit for bit
    result = P.check_row(first, row)
    assert result.ok and len(result.deviation) > 20


def _numbers_only(fresh, committed):
    """``fresh`` with the committed configuration: only the numbers can tell the two apart."""
    return dict(fresh, config=committed["config"])


@pytest.mark.parametrize("change", ["one step more", "learning rate 1 % off"])
def test_power_against_a_changed_run(change):
    row = _first_reference("trained_grid")
    cfg = dict(row["config"])
    if change == "one step more":
        cfg["steps"] += 1
    else:
        cfg["lr"] *= 1.01
    fresh = json.loads(json.dumps(run_config(TrainConfig(**cfg))))
    result = P.compare_rows(_numbers_only(fresh, row), row)
    # caught by the continuous numbers themselves, not only by a longer loss curve
    assert any(q.startswith("proxies.") and 0 < t < d < math.inf for q, d, t in result.failures), result.summary()


def test_power_against_one_flipped_training_label(monkeypatch):
    row = _first_reference("trained_grid")
    real = TR.sample

    def flipped(task, n, stream):
        X, y, bits = real(task, n, stream)
        if stream == TR.TRAIN_STREAM:
            y = y.copy()
            y[0] = -y[0]
        return X, y, bits

    monkeypatch.setattr(TR, "sample", flipped)
    fresh = P.regenerate(row)
    result = P.compare_rows(fresh, row)
    assert any(q.startswith("proxies.") and 0 < t < d < math.inf for q, d, t in result.failures), result.summary()




# ----------------------------------------------------------------------------- another machine, simulated

def _regenerate_elsewhere(specs, env):
    """Rows regenerated in a subprocess that takes other CPU code paths."""
    base = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    cmd = [sys.executable, "-m", "bounds_lib.studies.reproduce", "regenerate", "--rows", *specs]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=base | env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [r["row"] for r in json.loads(proc.stdout)]


def _old_bitwise_check(fresh, committed):
    """The check this module replaced: every stored number equal (Chapter 7 and tests/test_grid.py)."""
    keys = [k for k in committed if k not in P.IGNORED_KEYS]
    assert all(fresh[k] == committed[k] for k in keys), "the committed row is not reproduced"


def test_simulated_other_cpu_fails_the_old_check_and_passes_the_new():
    """Chapters 7 and 8 rows under ATen's scalar kernels and MKL's compatible path, in a subprocess."""
    entries = {r["results"]: r["index"] for r in reversed(TABLE["reference_rows"])}
    specs = [f"trained_grid:{entries['trained_grid']}", f"study:{entries['study']}"]
    committed = [_first_reference("trained_grid"), _first_reference("study")]
    here = [P.regenerate(r) for r in committed]
    there = _regenerate_elsewhere(specs, {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"})
    for h, t, c in zip(here, there, committed):
        assert not P.bitwise_equal(t, h)  # the simulation is real: other bits than this machine's default
        with pytest.raises(AssertionError, match="not reproduced"):
            _old_bitwise_check(t, c)
        P.check_row(t, c)


@pytest.mark.slow
def test_cli_check_regenerates_every_reference_row_within_tolerance(capsys):
    assert P.main(["check", "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(TABLE["reference_rows"]) and all(": ok — " in line for line in out), out




@pytest.mark.parametrize("fails", [False, True])
def test_regenerate_trains_on_the_threads_asked_and_restores_the_count(monkeypatch, fails):
    """The training itself is replaced by a recorder (the rows' regeneration is tested above): it runs on the
    threads asked, and the count before is back afterwards, after a training that fails too."""
    import torch

    from bounds_lib.studies import grid

    seen = []

    def recorded(cfg):
        seen.append((torch.get_num_threads(), cfg))
        if fails:
            raise RuntimeError("training failed")
        return {"config": {}, "numbers": [1.0]}

    monkeypatch.setattr(grid, "run_config", recorded)
    before = torch.get_num_threads()
    row = _first_reference("trained_grid")
    threads = 3 if before != 3 else 2
    if fails:
        with pytest.raises(RuntimeError, match="training failed"):
            P.regenerate(row, threads=threads)
    else:
        assert P.regenerate(row, threads=threads) == {"config": {}, "numbers": [1.0]}
    assert seen == [(threads, TrainConfig(**row["config"]))]
    assert torch.get_num_threads() == before
