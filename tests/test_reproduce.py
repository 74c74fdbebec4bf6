"""The comparison of regenerated with committed rows and the measured tolerance (bounds_lib.reproduce;
the measurement: benchmarks/cpu_spread.py). Fast: no training (the regenerations are in
tests/test_reproduce_regenerate.py)."""
import json
import math

import pytest

from bounds_lib import reproduce as P
from bounds_lib.results import load_results

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


@pytest.mark.parametrize("proxy", ["B_ours_sum", "B_edelman", "prod_spectral", "sum_frobenius", "readout_norm"])
def test_power_against_a_proxy_moved_by_1e_4(proxy):
    row = _first_reference("trained_grid")
    moved = json.loads(json.dumps(row))
    moved["proxies"][proxy] *= 1 + 1e-4
    assert not P.compare_rows(moved, row).ok
    assert P.compare_rows(json.loads(json.dumps(row)), row).bitwise


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


# ----------------------------------------------------------------------------- summaries and row choice

def _table(**over):
    t = {"schema": P.TOLERANCE_SCHEMA, "factor": 10.0, "screen_threshold": 1e-5, "machine": {"cpu": "x"},
         "spread": {"train_loss": 2e-6, "proxies.B_11": 3e-7, "proxies.p_star.M": 0.0, "config.lr": 0.0,
                    "singular_values.QK[]": 5e-7},
         "settings": [{"bits_differ_from_default": False}, {"bits_differ_from_default": True}],
         "screen": [{"results": "a", "well_conditioned": True, "discrete_differs": False, "max_deviation": 1e-7},
                    {"results": "a", "well_conditioned": False, "discrete_differs": True, "max_deviation": 0.3},
                    {"results": "a", "well_conditioned": False, "discrete_differs": False, "max_deviation": 0.02},
                    {"results": "b", "well_conditioned": True, "discrete_differs": False, "max_deviation": 2e-6}]}
    t["tolerance"] = {q: 10.0 * s for q, s in t["spread"].items()}
    return t | over


def test_spread_summary_groups_and_counts():
    s = P.spread_summary(_table())
    g = s["groups"]
    assert g["losses and errors"] == {"moved": 1, "exact": 0, "spread": 2e-6, "tolerance": 10.0 * 2e-6}
    assert g["bound proxies"] == {"moved": 1, "exact": 1, "spread": 3e-7, "tolerance": 10.0 * 3e-7}
    assert g["singular values"]["moved"] == 1 and g["configuration"] == {"moved": 0, "exact": 1, "spread": 0.0,
                                                                           "tolerance": 0.0}
    assert s["screen"]["a"] == {"screened": 3, "well_conditioned": 1, "worst_other": 0.3, "discrete_differs": 1}
    assert s["screen"]["b"]["worst_other"] == 0.0
    assert (s["n_settings"], s["n_changed"], s["factor"], s["threshold"]) == (2, 1, 10.0, 1e-5)


def test_spread_markdown_is_a_table_in_reading_order():
    lines = P.spread_markdown(_table()).splitlines()
    assert lines[0].startswith("| quantities | moved |") and len(lines) == 2 + 4
    assert lines[2] == "| losses and errors | 1 | 2.0e-06 | 2.0e-05 | 0 |"
    assert lines[3] == "| bound proxies | 1 | 3.0e-07 | 3.0e-06 | 1 |"
    assert lines[5] == "| configuration | 0 | 0 | exact | 1 |"


def test_summary_lines_and_worst():
    committed = {f"x{i}": 1.0 for i in range(7)}
    tol = {q: 1e-6 for q in committed}
    assert P.compare_rows(dict(committed), committed, tol).summary() == "all 7 quantities identical bit for bit"
    near = dict(committed, x3=1.0 + 5e-7, x5=1.0 + 1e-7)
    r = P.compare_rows(near, committed, tol)
    assert r.ok and not r.bitwise and r.worst[0] == "x3" and math.isclose(r.worst[1], 5e-7, rel_tol=1e-6)
    assert r.summary().startswith("all 7 quantities within tolerance (discrete ones exact); closest: x3 5.0e-07")
    far = {q: 2.0 for q in committed}
    assert P.compare_rows(far, committed, tol).summary().endswith("(and 2 more)")
    assert P.compare_rows({"n": 1}, {"n": 1}, {}).worst == ("", 0.0, 0.0)


def test_row_cost_and_cheapest_rows():
    row = {"config": {"L": 2, "N": 3, "n_train": 5, "steps": 100}}
    assert P.row_cost(row) == 2 * 9 * 5 * 100 and P.row_cost(dict(row, steps_taken=7)) == 2 * 9 * 5 * 7
    rows = load_results("trained_grid")["rows"]
    picked = P.cheapest_rows("trained_grid", 5)
    costs = [P.row_cost(rows[i]) for i in picked]
    assert costs == sorted(costs) and costs[-1] <= min(P.row_cost(r) for i, r in enumerate(rows) if i not in picked)
    ties = [i for i in picked if P.row_cost(rows[i]) == costs[0]]
    assert ties == sorted(ties)


def test_flatten_walks_lists_of_dicts_and_leaves_empty_lists():
    flat = P.flatten_row({"a": [{"b": 1}, {"b": 2.0}], "e": [], "weights_file": "w", "s": None})
    assert flat == {"a[0].b": 1, "a[1].b": 2.0, "s": None}
    assert P.quantity("x.y[3].z[12]") == "x.y[].z[]"
