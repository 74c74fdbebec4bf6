"""``glue`` for chapters that also run as plain notebooks.

Inside the book build, MyST-NB's :func:`myst_nb.glue` stores a value so that the page can cite it
with ``{glue:text}``. In a plain Jupyter or Colab session MyST-NB is usually absent (and installing
it pulls Sphinx): there the generated notebook already carries the executed numbers in its text,
so ``glue`` only needs to display the value when asked to, and otherwise do nothing.
"""
from __future__ import annotations

from typing import Any

__all__ = ["glue", "HAVE_MYST_NB"]

try:  # the book build (and any environment with MyST-NB installed)
    from myst_nb import glue as _myst_glue
except ImportError:  # plain Jupyter / Colab / a script
    _myst_glue = None

HAVE_MYST_NB = _myst_glue is not None


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Store ``variable`` under ``name`` for the book; in a plain notebook, show it or do nothing.

    A NumPy scalar is glued as the Python number it holds: NumPy 2 prints ``np.float64(0.53)``, which
    ``{glue:text}`name:.2f``` could not format. A matplotlib figure glued with ``display=False`` is
    closed once stored (in the book build and in plain Jupyter alike, so a chapter prints the same in
    both): the page
    shows it where ``{glue:figure}`` places it, and the inline backend does not draw it a second time
    under its cell (nor does the executed notebook keep a second copy).

    Parameters
    ----------
    name : str
        The key a page cites with ``{glue:text}`name```.
    variable : object
        The value (a number, a string, a figure, a DataFrame...).
    display : bool
        Whether the cell shows the value (as :func:`myst_nb.glue` does).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"glue name must be a non-empty str, got {name!r}")
    variable = _plain_scalar(variable)
    if _myst_glue is not None:
        _myst_glue(name, variable, display=display)
    elif display:
        try:
            from IPython.display import display as _show
        except ImportError:  # not in IPython: nothing to show
            return
        _show(variable)
    if not display:
        # the figure appears where its caption is (the page; the generated notebook's attachment)
        _close_if_figure(variable)


def _close_if_figure(variable: Any) -> None:
    try:
        from matplotlib.figure import Figure
    except ImportError:  # no matplotlib: nothing can be a figure
        return
    if isinstance(variable, Figure):
        import matplotlib.pyplot as plt

        plt.close(variable)


def _plain_scalar(variable: Any) -> Any:
    try:
        import numpy as np
    except ImportError:  # no NumPy: nothing can be a NumPy scalar
        return variable
    return variable.item() if isinstance(variable, np.generic) else variable
