"""bounds_lib.core.glue: the book build's glue, and plain Jupyter without MyST-NB."""
import pytest


def test_glue_closes_a_figure_it_does_not_display():
    """In the book build a figure glued with display=False is closed: the inline backend does not draw it a
    second time under its cell (the page and the generated notebook show it once, where it is captioned)."""
    pytest.importorskip("myst_nb")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bounds_lib.core.glue import glue

    fig, _ = plt.subplots()
    glue("test_fig_closed", fig, display=False)
    assert not plt.fignum_exists(fig.number)
    shown, _ = plt.subplots()
    glue("test_fig_shown", shown, display=True)
    assert plt.fignum_exists(shown.number)
    plt.close(shown)


def test_glue_refuses_an_empty_name():
    from bounds_lib.core.glue import glue

    with pytest.raises(TypeError, match="glue name must be a non-empty str"):
        glue("", 1)


def test_numpy_scalars_are_glued_as_python_numbers(monkeypatch):
    """NumPy 2 prints np.float64(0.5); the book's {glue:text}`key:.2f` needs the plain number."""
    import numpy as np

    import bounds_lib.core.glue as G

    seen = []
    monkeypatch.setattr(G, "_myst_glue", lambda name, v, display=True: seen.append(v))
    G.glue("a", np.float64(0.53), display=False)
    G.glue("b", np.int64(7), display=False)
    G.glue("c", np.array([1.0]), display=False)
    assert [type(v) for v in seen] == [float, int, np.ndarray] and seen[0] == 0.53 and repr(seen[0]) == "0.53"


def test_plain_jupyter_closes_an_undisplayed_figure_too(monkeypatch):
    """Without MyST-NB (a reader's Jupyter) the chapter prints what the book printed: no stray figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import bounds_lib.core.glue as G

    monkeypatch.setattr(G, "_myst_glue", None)
    fig, _ = plt.subplots()
    G.glue("x", fig, display=False)
    assert not plt.fignum_exists(fig.number)
