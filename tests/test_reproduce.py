"""Committed rows regenerate on any CPU to the measured tolerance, bit for bit on one machine, and the
check has power (bounds_lib.reproduce; the measurement: benchmarks/cpu_spread.py)."""
import json
import math
import os
import subprocess
import sys

import pytest

from bounds_lib import reproduce as P
from bounds_lib import training as TR
from bounds_lib.grid import run_config
from bounds_lib.results import load_results
from bounds_lib.training import TrainConfig

TABLE = P.load_tolerances()


def _first_reference(name):
    return P.reference_rows(name)[0]


# ----------------------------------------------------------------------------- the comparison itself

def test_scalar_deviation_is_relative_and_vector_deviation_is_normwise():
    dev = P.deviations({"x": 2.0 * (1 + 3e-7), "v": [10.0, 1e-9]}, {"x": 2.0, "v": [10.0, 0.0]})
    assert math.isclose(dev["x"][0], 3e-7 / (1 + 3e-7), rel_tol=1e-9)
    # the numerically zero entry moves by 1e-9 against a vector of scale 10: 1e-10, not infinity
    assert math.isclose(dev["v"][0], 1e-10, rel_tol=1e-12) and dev["v"][1] is False


@pytest.mark.parametrize("fresh, committed", [
    ({"n": 3}, {"n": 4}),                    # an integer
    ({"b": True}, {"b": False}),             # a flag
    ({"h": "00ff"}, {"h": "00fe"}),          # per-example results
    ({"n": 3.0}, {"n": 3}),                  # a float where the file has an integer
])
def test_discrete_quantities_must_be_equal(fresh, committed):
    r = P.compare_rows(fresh, committed, tolerances={})
    assert not r.ok and all(math.isinf(d) for _, d, _ in r.failures)
    assert P.compare_rows(committed, committed, tolerances={}).ok


@pytest.mark.parametrize("fresh, committed", [
    ({"x": 1.0}, {"x": 1.0, "y": 2.0}),      # a quantity missing
    ({"v": [1.0, 2.0]}, {"v": [1.0, 2.0, 3.0]}),  # a vector of another length
    ({"x": float("nan")}, {"x": float("nan")}),  # NaN never reproduces anything
    ({"x": float("inf")}, {"x": 1.0}),
])
def test_missing_resized_and_non_finite_values_fail_under_any_tolerance(fresh, committed):
    assert not P.compare_rows(fresh, committed, tolerances={"x": 1e9, "y": 1e9, "v": 1e9}).ok


def test_tolerance_is_a_bound_not_a_rounding():
    committed = {"x": 1.0}
    assert P.compare_rows({"x": 1.0 + 0.99e-6}, committed, {"x": 1e-6}).ok
    assert not P.compare_rows({"x": 1.0 + 1.02e-6}, committed, {"x": 1e-6}).ok
    # a continuous quantity without a measured tolerance must be identical
    assert not P.compare_rows({"z": 1.0 + 1e-15}, {"z": 1.0}, {"x": 1e-6}).ok
    assert P.compare_rows({"seconds": 9.0, "x": 1.0}, {"seconds": 1.0, "x": 1.0}, {}).bitwise


def test_check_row_raises_with_the_quantities_that_fail():
    with pytest.raises(P.ReproductionError, match=r"1 of 2 quantities outside tolerance: x: 9\.99e-04 > 1\.0e-06"):
        P.check_row({"x": 1.001, "y": 2.0}, {"x": 1.0, "y": 2.0}, {"x": 1e-6, "y": 1e-6})


def test_tolerance_file_is_refused_when_inconsistent(tmp_path):
    bad = dict(TABLE, tolerance={q: t / 20 for q, t in TABLE["tolerance"].items()})
    (tmp_path / "t.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="must be finite, >= 0 and >= factor × spread"):
        P.load_tolerances(tmp_path / "t.json")
    (tmp_path / "s.json").write_text(json.dumps(dict(TABLE, schema="other/0")))
    with pytest.raises(ValueError, match="not a tolerance file"):
        P.load_tolerances(tmp_path / "s.json")


# ----------------------------------------------------------------------------- the committed measurement

def test_measured_table_is_what_the_tolerance_is_made_of():
    assert TABLE["factor"] == P.FACTOR and TABLE["tolerance"].keys() == TABLE["spread"].keys()
    for q, s in TABLE["spread"].items():
        assert TABLE["tolerance"][q] == P.FACTOR * s
    # power needs room: no proxy may be allowed to move by 1e-4 relative
    proxies = {q: t for q, t in TABLE["tolerance"].items() if q.startswith("proxies.")}
    assert proxies and max(proxies.values()) < 1e-4
    # the settings really take other code paths: most of them change bits
    changed = [s["setting"] for s in TABLE["settings"] if s["bits_differ_from_default"]]
    assert len(changed) >= len(TABLE["settings"]) // 2, changed
    assert all(s["bits_differ_from_committed"] for s in TABLE["settings"])  # made on another CPU kind
    names = {r["results"] for r in TABLE["reference_rows"]}
    assert {"trained_grid", "common_loss", "study"} <= names


def test_screened_rows_are_classified_by_the_threshold():
    for s in TABLE["screen"]:
        assert s["well_conditioned"] == (not s["discrete_differs"] and s["max_deviation"] <= TABLE["screen_threshold"])
    ref = {(r["results"], r["index"]) for r in TABLE["reference_rows"]}
    assert ref <= {(s["results"], s["index"]) for s in TABLE["screen"] if s["well_conditioned"]}


def test_a_changed_results_file_is_refused(monkeypatch):
    real = load_results

    def shifted(name):
        d = real(name)
        return dict(d, rows=d["rows"][1:])

    monkeypatch.setattr("bounds_lib.results.load_results", shifted)
    with pytest.raises(ValueError, match="not the row the tolerance was measured on"):
        P.reference_rows("trained_grid")


# ----------------------------------------------------------------------------- regeneration

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


@pytest.mark.parametrize("proxy", ["B_ours_sum", "B_edelman", "prod_spectral", "sum_frobenius", "readout_norm"])
def test_power_against_a_proxy_moved_by_1e_4(proxy):
    row = _first_reference("trained_grid")
    moved = json.loads(json.dumps(row))
    moved["proxies"][proxy] *= 1 + 1e-4
    assert not P.compare_rows(moved, row).ok
    assert P.compare_rows(json.loads(json.dumps(row)), row).bitwise


# ----------------------------------------------------------------------------- another machine, simulated

def _regenerate_elsewhere(specs, env):
    """Rows regenerated in a subprocess that takes other CPU code paths."""
    base = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    cmd = [sys.executable, "-m", "bounds_lib.reproduce", "regenerate", "--rows", *specs]
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


@pytest.mark.parametrize("argv, message", [
    (["regenerate", "--rows", "study"], "expected RESULTS:INDEX"),
    (["regenerate", "--rows", "nothing:0"], "unknown results 'nothing'"),
    (["regenerate", "--rows", "trained_grid:100000"], "has 80 rows; no row 100000"),
    (["check", "--rows", "study:0"], "--rows goes with regenerate"),
    (["check", "--threads", "0"], "--threads must be >= 1"),
])
def test_cli_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        P.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_regenerate_restores_the_thread_count():
    import torch

    before = torch.get_num_threads()
    P.regenerate(_first_reference("trained_grid"), threads=2)
    assert torch.get_num_threads() == before
