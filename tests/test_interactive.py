"""bounds_lib.teaching.interactive: frames behind a slider, drawn from real and synthetic spectra."""
import re

import numpy as np
import pytest

from bounds_lib.teaching import interactive as I
from bounds_lib.theory.interpolation import entropy_low_rank_volumetric, entropy_tail_maurey
from bounds_lib.theory.peeling import posthoc_choice, posthoc_grid

PNG = b"\x89PNG\r\n\x1a\n"


def test_slider_html_holds_every_frame_and_starts_where_asked():
    s = I.Slider([PNG + b"a", PNG + b"b", PNG + b"c"], ["x = 1", "x = 2", "x = 3"], "x", "Three frames.", start=1)
    h = s._repr_html_()
    uris = re.findall(r"data:image/png;base64,[A-Za-z0-9+/=]+", h)
    assert len(uris) == 1 + 3 and uris[0] == uris[2]  # the shown image is frame 1, then the list of all
    assert 'value="1"' in h and 'max="2"' in h and "<output>x = 2</output>" in h and 'alt="Three frames."' in h
    assert "http" not in h  # nothing loaded from a server
    assert s._repr_png_() == PNG + b"b"
    # the same in every run (a notebook's output is compared across runs): no address, no counter
    assert h == s._repr_html_() and repr(s) == "Slider('x', 3 frames, showing 'x = 2')"
    other = I.Slider([PNG + b"a", PNG + b"b"], ["x = 1", "x = 2"], "x", "Two frames.")
    assert other._repr_html_().split('id="')[1][:24] != h.split('id="')[1][:24]  # another widget, another id


@pytest.mark.parametrize("args, exc, match", [
    (([], [], "x", "a"), ValueError, "one label per frame"),
    (([PNG], ["a", "b"], "x", "a"), ValueError, "one label per frame"),
    ((["not bytes"], ["a"], "x", "a"), TypeError, "PNG bytes"),
])
def test_slider_refuses_bad_frames(args, exc, match):
    with pytest.raises(exc, match=match):
        I.Slider(*args)
    with pytest.raises(ValueError, match="start"):
        I.Slider([PNG], ["a"], "x", "a", start=1)


def test_tau_split_frames_compute_the_two_terms_of_the_split():
    sigma = 3.0 * np.arange(1, 21, dtype=float) ** -1.0
    taus = [0.1, 0.5, 1.5]
    s = I.tau_split_frames(sigma, (20, 30), taus, eps=0.5, n_rows=100)
    assert len(s.frames) == 3 and all(f.startswith(PNG) for f in s.frames)
    sums = []
    for t in taus:
        r, rho = int(np.sum(sigma > t)), float(np.sqrt(np.sum(sigma[sigma <= t] ** 2)))
        sums.append(entropy_low_rank_volumetric(r, 20, 30, 3.0, 0.25) + float(entropy_tail_maurey(rho, 0.25, 30, 100)))
    assert s.start == int(np.argmin(sums))
    for label, t, total in zip(s.labels, taus, sums):
        assert label == f"τ = {t:.3g}: rank {int(np.sum(sigma > t))}, sum {total:.3g} nats"
    with pytest.raises(ValueError, match="two positive thresholds"):
        I.tau_split_frames(sigma, (20, 30), [0.5], eps=0.5, n_rows=100)
    with pytest.raises(ValueError, match="singular values"):
        I.tau_split_frames([0.0, 0.0], (2, 2), taus, eps=0.5, n_rows=10)


def test_posthoc_frames_mark_the_grid_and_p_star():
    N, L = 16, 2
    grid = posthoc_grid(L, N)
    flat, fast = np.ones(N), 2.0 ** -np.arange(N)
    s = I.posthoc_frames({"flat": (flat, 0.0), "fast": (fast, 0.0)}, N, grid, every=3)
    assert len(s.frames) == len(range(0, grid.size, 3))
    c = posthoc_choice(fast, 0.0, N, grid)
    assert s.labels[1].startswith(f"p = {grid[3]:.3g}: log10 T = flat ")
    assert s.labels[1].endswith(f"fast {c.log_T[3] / np.log(10):.3g}")
    with pytest.raises(ValueError, match="at least one matrix"):
        I.posthoc_frames({}, N, grid)
