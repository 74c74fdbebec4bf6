"""The figures of Chapter 6 (:mod:`bounds_lib.analysis.plotting`), the (1,1)-norm panels say when those norms were
not computed, and bad arguments are named."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from bounds_lib.analysis import plotting  # noqa: E402
from bounds_lib.checkpoints import random_bert_state_dict  # noqa: E402
from bounds_lib.analysis.scoring import analyze, score  # noqa: E402
from bounds_lib.analysis.spectra import compute_spectra  # noqa: E402

FIGURES = ("figure_spectral_decay", "figure_T_ratio", "figure_norms", "figure_p_star_histogram",
           "figure_prefix_depth", "figure_scaling")


@pytest.fixture(scope="module")
def model():
    return random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16, seed=3)


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_norms_figure_says_when_11_norms_are_missing(model):
    state_dict, config = model
    full = plotting.figure_norms(analyze(state_dict, config=config))
    partial = plotting.figure_norms(analyze(state_dict, config=config, entrywise=False))
    try:
        assert not any("not computed" in t for t in _texts(full))
        assert sum("not computed" in t for t in _texts(partial)) == 2  # the (1,1) panel and the ratio panel
    finally:
        plt.close(full)
        plt.close(partial)


def test_type_panels_share_one_layout(model):
    """Spectral decay and T-ratio figures: four panels titled by matrix type, x labels on the bottom row,
    y labels on the left column, one colour bar."""
    state_dict, config = model
    sp = compute_spectra(state_dict, config=config)
    for fig in (plotting.figure_spectral_decay(sp, layers=[0, 1]), plotting.figure_T_ratio(score(sp))):
        try:
            panels, colorbar = fig.axes[:4], fig.axes[4:]
            assert [ax.get_title() for ax in panels] == list(plotting.MATRIX_TYPE_LABELS.values())
            assert [bool(ax.get_xlabel()) for ax in panels] == [False, False, True, True]
            assert [bool(ax.get_ylabel()) for ax in panels] == [True, False, True, False]
            assert len(colorbar) == 1 and colorbar[0].get_ylabel() == "layer"
        finally:
            plt.close(fig)


def test_bad_arguments_are_named(model):
    state_dict, config = model
    sp = compute_spectra(state_dict, config=config)
    with pytest.raises(TypeError, match="ModelSpectra"):
        plotting.figure_spectral_decay(score(sp))
    with pytest.raises(TypeError, match="BoundReport"):
        plotting.figure_T_ratio(sp)
    with pytest.raises(TypeError, match="every report"):
        plotting.figure_scaling([score(sp), sp])
    with pytest.raises(ValueError, match="no layer"):
        plotting.figure_spectral_decay(sp, layers=[5])
