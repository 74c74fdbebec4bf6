"""The comparison of regenerated with committed rows and the measured tolerance (bounds_lib.studies.reproduce;
the measurement: benchmarks/cpu_spread.py). Fast: no training (the regenerations are in
tests/test_reproduce_regenerate.py)."""
import json
import math

import pytest

from bounds_lib.studies import reproduce as P
from bounds_lib.studies.results import RESULTS_FILES, load_results

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

    monkeypatch.setattr("bounds_lib.studies.results.load_results", shifted)
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


# ------------------------------------------------------------------------- written against mutation survivors

def test_deviations_reports_every_quantity_with_its_kind():
    fresh = {"s": 1.0, "h": 0.5, "v": [3.0, 0.0], "z": [1.0], "n": 2, "f": "a", "blocks": [[1.0, 2.0], [4.0, 8.0]],
             "extra": 1.0, "short": [1.0], "none": None}
    committed = {"s": 0.5, "h": 0.5, "v": [3.0, 1.5], "z": [0.0], "n": 2, "f": "b", "blocks": [[1.0, 2.0], [4.0, 6.0]],
                 "short": [1.0, 2.0], "none": None, "gone": 1.0}
    dev = P.deviations(fresh, committed)
    assert dev == {
        "s": (0.5, False),            # |1 − 0.5| / max(1, 0.5)
        "h": (0.0, False),
        "v": (0.5, False),            # |0 − 1.5| / 3, the vector's scale
        "z": (math.inf, False),       # a committed vector of zeros has no scale: any change is infinite
        "n": (0.0, True), "f": (math.inf, True), "none": (0.0, True),
        "blocks[]": (2 / 6, False),   # the largest over both layers: |8 − 6| / 6, the committed scale
        "extra": (math.inf, False), "gone": (math.inf, False), "short": (math.inf, False),
    }


def test_a_quantity_is_discrete_only_if_every_leaf_is():
    dev = P.deviations({"a": [{"x": 1}, {"x": 1.0}]}, {"a": [{"x": 1}, {"x": 1.0}]})
    assert dev == {"a[].x": (0.0, False)}
    assert P.deviations({"a": [{"x": 1}, {"x": 2}]}, {"a": [{"x": 1}, {"x": 2}]}) == {"a[].x": (0.0, True)}


def test_discrete_mismatch_fails_even_under_an_infinite_tolerance():
    r = P.compare_rows({"n": 3, "x": 1.5}, {"n": 4, "x": 1.0}, {"n": math.inf})
    assert r.failures == [("n", math.inf, 0.0), ("x", 0.5 / 1.5, 0.0)]  # x has no tolerance: must be equal
    assert P.compare_rows({"x": 1.5}, {"x": 1.0}, {"x": 0.5}).ok


def test_tolerance_file_messages(tmp_path):
    def refused(table, match):
        f = tmp_path / "t.json"
        f.write_text(json.dumps(table))
        with pytest.raises(ValueError, match=match):
            P.load_tolerances(f)

    base = _table()
    refused(dict(base, tolerance=[1]), rf"^{tmp_path / 't.json'}: 'tolerance' and 'spread' must map the same")
    refused(dict(base, spread=[1]), "must map the same quantities")
    refused(dict(base, tolerance=dict(base["tolerance"], extra=1.0)), "must map the same quantities")
    low = dict(base, tolerance=dict(base["tolerance"], train_loss=1e-6))
    refused(low, r"tolerance of 'train_loss' is 1e-06; it must be finite, >= 0 and >= factor × spread = 2e-05$")
    refused(dict(base, tolerance=dict(base["tolerance"], train_loss=math.inf)), "must be finite")
    refused(["not", "a", "table"], "not a tolerance file of format 'bounds_lib.cpu-tolerance/1'")
    assert P.load_tolerances()["schema"] == P.TOLERANCE_SCHEMA


def test_summary_counts_failures_past_five():
    committed = {f"x{i}": 1.0 for i in range(6)}
    five = dict(committed, **{f"x{i}": 2.0 for i in range(5)})
    s5 = P.compare_rows(five, committed, {}).summary()
    assert s5 == "5 of 6 quantities outside tolerance: " + "; ".join(f"x{i}: 5.00e-01 > 0.0e+00" for i in range(5))
    six = {q: 2.0 for q in committed}
    assert P.compare_rows(six, committed, {}).summary() == s5.replace("5 of 6", "6 of 6") + " (and 1 more)"


def test_spread_summary_defaults_to_the_committed_table():
    assert P.spread_summary() == P.spread_summary(P.load_tolerances())
    s = P.spread_summary(_table(spread={"train_loss": 1e-6, "test_loss": 2e-6, "gap_error": 0.0, "test_error": 0.0},
                                tolerance={"train_loss": 1e-5, "test_loss": 2e-5, "gap_error": 0.0,
                                           "test_error": 0.0}))
    assert s["groups"] == {"losses and errors": {"moved": 2, "exact": 2, "spread": 2e-6, "tolerance": 2e-5}}
    assert s["machine"] == {"cpu": "x"}


def test_reference_rows_refuses_unknown_results_and_rows_past_the_end(monkeypatch):
    measured = ", ".join(sorted({r["results"] for r in TABLE["reference_rows"]}))
    with pytest.raises(ValueError, match=rf"no reference rows for results 'nothing'; measured: {measured}$"):
        P.reference_rows("nothing")
    real = load_results

    def truncated(name):
        d = real(name)
        return dict(d, rows=d["rows"][:TABLE["reference_rows"][0]["index"]])

    monkeypatch.setattr("bounds_lib.studies.results.load_results", truncated)
    with pytest.raises(ValueError, match=r"row \d+ is not the row the tolerance was measured on; rerun "
                                         r"benchmarks/cpu_spread\.py$"):
        P.reference_rows(TABLE["reference_rows"][0]["results"])


@pytest.mark.parametrize("spec", ["study:1:2", "study:x", "study", ":3"])
def test_row_specs_are_results_colon_index(spec, capsys):
    with pytest.raises(SystemExit):
        P.main(["regenerate", "--rows", spec])
    err = capsys.readouterr().err
    assert "expected RESULTS:INDEX" in err or "unknown results ''" in err


def test_cli_without_training(monkeypatch, capsys):
    """``check`` and ``regenerate`` with the training replaced by a copy of the committed row."""
    calls = []

    def fake(row, threads=1):
        calls.append(threads)
        return json.loads(json.dumps(row))

    monkeypatch.setattr(P, "regenerate", fake)
    assert P.main(["regenerate", "--rows", "trained_grid:3", "study:12", "--threads", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["results"], r["index"]) for r in out] == [("trained_grid", 3), ("study", 12)] and calls == [2, 2]
    assert out[0]["row"] == load_results("trained_grid")["rows"][3]
    calls.clear()
    assert P.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    want = [f"{r['results']}[{r['index']}]: ok — all" for r in TABLE["reference_rows"]]
    assert [ln[:len(w)] for ln, w in zip(lines, want)] == want and len(lines) == len(want) and calls == [1] * len(want)
    assert all(ln.endswith("quantities identical bit for bit") for ln in lines)
    assert P.main(["regenerate"]) == 0  # default rows: every reference row, as JSON
    assert [(r["results"], r["index"]) for r in json.loads(capsys.readouterr().out)] == [
        (r["results"], r["index"]) for r in TABLE["reference_rows"]]

    def off(row, threads=1):
        bad = json.loads(json.dumps(row))
        bad["train_loss"] *= 1.01
        return bad

    monkeypatch.setattr(P, "regenerate", off)
    assert P.main(["check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert all(": NOT REPRODUCED — 1 of " in ln and "train_loss: 9.90e-03" in ln for ln in lines), lines


def test_cli_help_and_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        P.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps at the terminal's width
    assert exc.value.code == 0 and out.startswith("usage: python -m bounds_lib.studies.reproduce [-h]")
    for text in ("Regenerate committed results rows on this machine.", "{check,regenerate}",
                 "torch threads (default 1, as the grids ran)", "--rows RESULTS:INDEX [RESULTS:INDEX ...]",
                 "rows to regenerate (regenerate only; default: the reference rows)"):
        assert text in out, text
    for argv, message in ((["compare"], "invalid choice: 'compare' (choose from 'check', 'regenerate')"),
                          (["regenerate", "--rows", "trained_grid:80"], "has 80 rows; no row 80"),
                          (["check", "--rows", "study:0"],
                           "--rows goes with regenerate; check always uses the reference rows"),
                          (["regenerate", "--rows", "nothing:0"],
                           "unknown results 'nothing'; supported: " + ", ".join(RESULTS_FILES))):
        with pytest.raises(SystemExit):
            P.main(argv)
        assert message in capsys.readouterr().err, argv


def test_cli_check_fails_if_any_row_fails(monkeypatch, capsys):
    first = TABLE["reference_rows"][0]["config"]

    def off_first(row, threads=1):
        bad = json.loads(json.dumps(row))
        if row["config"] == first:
            bad["test_loss"] *= 1.01
        return bad

    monkeypatch.setattr(P, "regenerate", off_first)
    assert P.main(["check"]) == 1  # the later rows pass; the first one's failure still fails the run
    lines = capsys.readouterr().out.splitlines()
    assert "NOT REPRODUCED" in lines[0] and all(": ok — " in ln for ln in lines[1:])


def test_spread_markdown_alignment_row():
    assert P.spread_markdown(_table()).splitlines()[1] == "|---|---:|---:|---:|---:|"
