"""The ESD figure (a panel for every layer, none empty) and the scaling figure without empty panels."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from bounds_lib.analysis import plotting as P  # noqa: E402
from bounds_lib.analysis.scoring import analyze  # noqa: E402
from bounds_lib.analysis.spectra import compute_spectra  # noqa: E402
from bounds_lib.checkpoints import random_bert_state_dict  # noqa: E402


@pytest.mark.parametrize("L", [1, 3, 4])
def test_esd_has_one_nonempty_panel_per_layer(L):
    sd, cfg = random_bert_state_dict(n_layers=L, hidden=8, n_heads=2, d_ff=16)
    fig = P.figure_esd(compute_spectra(sd, config=cfg))
    assert [ax.get_title() for ax in fig.axes] == [f"layer {l}" for l in range(L)]
    # four histograms (one per matrix type) in every panel; the key names the four types
    assert all(len(ax.patches) == 4 for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(P.MATRIX_TYPE_LABELS.values())
    # the lowest panel of every column carries the x label (an odd L's last-but-one included)
    labelled = [ax.get_title() for ax in fig.axes if ax.get_xlabel()]
    assert labelled == [f"layer {l}" for l in range(L) if l + min(2, L) >= L]
    plt.close(fig)


def _family(shapes):
    reports = []
    for L, N in shapes:
        sd, cfg = random_bert_state_dict(n_layers=L, hidden=N, n_heads=2, d_ff=2 * N)
        reports.append(analyze(sd, config=cfg))
    return reports


def test_scaling_draws_only_panels_with_a_curve():
    one_width = P.figure_scaling(_family([(1, 8), (2, 8), (3, 8)]))
    assert len(one_width.axes) == 2 and all(ax.lines for ax in one_width.axes)
    both = P.figure_scaling(_family([(1, 8), (2, 8), (1, 16)]))
    assert len(both.axes) == 4 and all(ax.lines for ax in both.axes)
    with pytest.raises(ValueError, match=r"differ only in N or only in L; got \(L=1, N=8\), \(L=2, N=16\)"):
        P.figure_scaling(_family([(1, 8), (2, 16)]))
    plt.close("all")
