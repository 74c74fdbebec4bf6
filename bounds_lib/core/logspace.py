"""Log-space sum shared by :mod:`bounds_lib.theory.peeling` and :mod:`bounds_lib.theory.propagation` (it lives below
both)."""
from __future__ import annotations

import numpy as np

__all__ = ["logsumexp"]


def logsumexp(a, axis=None):
    """``log Σ exp(a)`` without overflow; ``-inf`` entries contribute nothing (Chapter 4's aggregations).

    Public as :func:`bounds_lib.theory.peeling.logsumexp`; it lives here, below both ``peeling`` and
    ``propagation`` (the multi-head head sum), so that neither imports the other for it.

    Kept instead of ``scipy.special.logsumexp``, for a measured reason: SciPy (1.17) adds
    ``log1p`` of the sum of the non-maximal terms to the maximum, which differs from this
    ``log Σ exp(a − max) + max`` in the last bit on about 2.5 % of inputs — on the book's own inputs
    it changes glued values of Chapters 5 and 6 (e.g. ``B_ours`` of Chapter 6 from
    ``5.998964693778453`` to ``…464``). The two agree to a few units in the last place
    (``tests/test_peeling.py`` proves it, ``-inf`` entries and the axis argument included); an empty
    input raises here (SciPy returns ``-inf``).

    Parameters
    ----------
    a : array_like
        Log-space terms (``-inf`` allowed).
    axis : int, optional
        The axis to reduce (default: all entries).

    Returns
    -------
    float or numpy.ndarray
        ``log Σ exp(a)`` (a Python ``float`` for a full reduction).

    Examples
    --------
    >>> import math
    >>> round(math.exp(logsumexp([math.log(2.0), math.log(3.0), -math.inf])), 12)
    5.0
    >>> logsumexp([[0.0, -math.inf], [1000.0, 1000.0]], axis=1).round(6).tolist()
    [0.0, 1000.693147]
    """
    a = np.asarray(a, dtype=np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out if out.ndim else float(out)
