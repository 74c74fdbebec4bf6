"""Tables and figures of Chapters 7–8 (bounds_lib.studies.trained_report) on the committed results."""
import math

import numpy as np
import pytest

from bounds_lib.studies import results as R, stats as S, trained_report as T


def test_corrected_theorem_on_stored_spectra():
    rows = R.load_results("study")["rows"]
    plain = next(r for r in rows if R.variant_name(r["config"]) == "plain")
    L, N = plain["config"]["L"], plain["config"]["N"]
    rep = T.corrected_report(plain)
    # read as a one-head BERT checkpoint with M_in = I: the released proxy gains L full-rank terms N (p* = 0)
    assert math.isclose(10 ** plain["proxies"]["B_ours_sum"], 3 * L * N + math.sqrt(L), rel_tol=1e-12)
    assert math.isclose(math.exp(rep.log_B_released), 4 * L * N + math.sqrt(L), rel_tol=1e-9)
    assert math.isfinite(rep.log_Theta) and rep.log_Theta > rep.log_rss  # the Dudley factor exceeds 1
    assert T.measure([plain], "corrected_theta")[0] == rep.log_Theta / math.log(10)
    with pytest.raises(KeyError, match="no spectra"):
        T.corrected_report(R.load_results("trained_grid")["rows"][0])


def test_interval_table_points_are_the_granulated_kendall_values():
    real = [r for r in R.load_results("trained_grid")["rows"] if not r["config"]["random_labels"]]
    W = S.bootstrap_weights(T.clusters(real), n_boot=50)
    tab = T.interval_table(real, ["B_ours_sum", "n_params"], W)
    for k, t in tab.items():
        ref = S.granulated_kendall(real, lambda r: R.proxy_value(r, k))
        for h in ("overall", "L", "N", "n_train", "Psi"):
            assert math.isclose(t[h].value, ref[h], abs_tol=1e-12), (k, h)
        share, groups = t["wrong_N"]
        taus = S.group_taus(real, T.measure(real, k), "N", S.HYPERPARAMETERS)
        assert groups == int(np.isfinite(taus).sum()) and share == float(np.mean(taus[np.isfinite(taus)] < 0))
    only_tau = T.interval_table(real, ["B_ours_sum"], W, hypers=())
    assert set(only_tau["B_ours_sum"]) == {"overall"}
    text = T.markdown_table(tab, [("overall", "τ"), ("wrong_N", "wrong along N")])
    assert text.splitlines()[2].startswith("| B_ours (sum) | ") and " of " in text.splitlines()[2]


def test_measure_refuses_what_the_rows_do_not_store():
    rows = R.load_results("trained_grid")["rows"]
    with pytest.raises(KeyError, match="steps_taken"):
        T.measure(rows, "steps_taken")
    with pytest.raises(KeyError, match="no proxy 'B_nonsense'"):
        T.measure(rows, "B_nonsense")
    assert np.array_equal(T.measure(rows, "train_error"), [r["train_error"] for r in rows])


def test_plot_spectra_takes_the_matrix_type():
    rows = R.load_results("study")["rows"][:8]
    fig = T.plot_spectra(rows, ["plain"], layer=0, matrix_type="V")
    assert fig.axes[0].get_ylabel() == "σ_i of W^V, layer 0"


def test_pair_changes_are_random_minus_real_pair_by_pair():
    pairs = T.label_pairs(R.load_results("common_loss")["rows"])
    assert pairs and all(not a["config"]["random_labels"] and b["config"]["random_labels"] for a, b in pairs)
    change = T.pair_changes(pairs)
    assert set(change) == set(T.PROXIES)
    for k, d in change.items():
        assert d.shape == (len(pairs),)
        i = len(pairs) // 2
        a, b = pairs[i]
        assert d[i] == R.proxy_value(b, k) - R.proxy_value(a, k)
    # the order matters: swapping the two networks of every pair flips every sign
    swapped = T.pair_changes([(b, a) for a, b in pairs], names=["B_edelman"])
    assert list(swapped) == ["B_edelman"] and np.array_equal(swapped["B_edelman"], -change["B_edelman"])


def _forest_table(n_measures=10, stats=("overall", "L", "N", "n_train", "Psi")):
    rng = np.random.default_rng(0)
    names = [*T.PROXIES, "train_error", "steps_taken"][:n_measures]
    return {k: {c: S.Interval(v, v - 0.3, v + 0.3, 100) for c, v in zip(stats, rng.uniform(-0.6, 0.6, len(stats)))}
            for k in names}


@pytest.mark.parametrize("n_stats", [1, 2, 3, 4, 5])
def test_forest_plot_is_compact_with_its_key_on_top(n_stats):
    """Issue #32: Chapter 7's forest plots were a 2+2+1 grid with an empty slot, 1.7 laptop screens tall,
    the key below the last row. Now: every slot holds a panel, at most two per row, the key above the
    panels, text at least 10 pt, and four statistics of ten measures fit a 1280 x 800 laptop screen
    (the figure is shown 672 px wide there)."""
    import matplotlib.pyplot as plt
    import matplotlib.style

    from bounds_lib.core.style import STYLE_FILE, min_font_pt, panels_per_row

    stats = ("overall", "L", "N", "n_train", "Psi")[:n_stats]
    with matplotlib.style.context(str(STYLE_FILE)):  # the book's style, as in the chapters
        fig = T.plot_forest(_forest_table(stats=stats), [(c, c) for c in stats])
    try:
        fig.draw_without_rendering()
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert len(fig.axes) == len(panels) == n_stats  # no hidden, empty slot
        assert all(ax.lines for ax in panels)
        assert panels_per_row(fig) <= 2 and min_font_pt(fig) >= 10
        r = fig.canvas.get_renderer()
        top = max(ax.get_tightbbox(r).y1 for ax in panels)
        (key,) = fig.legends
        assert key.get_window_extent(r).y0 >= top - 1, "the colour key is not above the panels"
        assert [t.get_text() for t in key.get_texts()] == ["interval above 0", "interval below 0", "contains 0"]
        bbox = fig.get_tightbbox(r)
        shown_px = bbox.height / bbox.width * 672
        if n_stats <= 4:
            assert shown_px <= 760, f"{shown_px:.0f} px tall at 1280 px"
        # only the left column names the measures
        for ax in panels:
            named = any(t.get_text() for t in ax.get_yticklabels() if t.get_visible())
            assert named == (ax.get_position().x0 < 0.3)
    finally:
        plt.close(fig)


def test_wrong_sign_groups_print_as_a_count_of_groups():
    """Issue #32: "0.81 of 26" printed a share beside a count; the table counts groups ("21 of 26")."""
    from bounds_lib.studies.stats import Interval

    tab = {"B_ours_sum": {"overall": Interval(-0.001, -0.2, 0.1, 10), "wrong_N": (21 / 26, 26),
                          "wrong_L": (float("nan"), 0), "slope": -0.004},
           "n_params": {"overall": Interval(0.3, 0.1, 0.5, 10), "wrong_N": (0.0, 26), "wrong_L": (1.0, 3),
                        "slope": -0.25}}
    text = T.markdown_table(tab, [("overall", "τ"), ("wrong_N", "N"), ("wrong_L", "L"), ("slope", "s")])
    rows = [line.split(" | ") for line in text.splitlines()[2:]]
    assert rows[0][1:] == ["+0.00 [−0.20, +0.10]", "21 of 26", "n/a", "+0.00 |"]
    assert rows[1][1:] == ["+0.30 [+0.10, +0.50]", "0 of 26", "3 of 3", "−0.25 |"]
