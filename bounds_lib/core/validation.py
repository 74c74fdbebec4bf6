"""One validation of user input for the whole library, in the style of scikit-learn's ``check_scalar``.

Every public function of ``bounds_lib`` checks its arguments with the helpers below, so that one
rule holds everywhere:

* a value of the wrong **type** raises :class:`TypeError` (``"L must be an integer, got float 3.0"``);
* a value of the right type but outside its **range** — NaN, ±inf where a finite number is needed, a
  negative dimension — raises :class:`ValueError` (``"L == 0, must be >= 1"``);
* ``True``/``False`` are **never numbers** (``bool`` is a subclass of ``int`` in Python; a flag passed
  by position to a numeric argument is a bug, not a 1);
* an **integer** parameter takes Python and NumPy integers only: ``3.0`` is refused with a
  :class:`TypeError`, as scikit-learn does (a float that happens to be whole is usually a value
  computed where a count was meant); a **real** parameter takes integers and floats alike;
* a **flag** takes ``True``/``False`` (Python or NumPy) only.

Arrays: :func:`as_real_array` turns what a user may hand the library — a NumPy array, a nested
list, a PyTorch tensor (on any device, with ``requires_grad``, in float16 or bfloat16) — into a real
NumPy array, and :func:`check_array` checks the values of a float64 array (finite, within bounds).
Following NumPy and scikit-learn, an array whose *contents* are unsuitable (complex, object,
strings, NaN, negative where a norm is meant) raises :class:`ValueError`.

Examples
--------
>>> check_scalar(3, "L", int, min_val=1)
3
>>> check_scalar(3.0, "L", int, min_val=1)
Traceback (most recent call last):
    ...
TypeError: L must be an integer, got float 3.0
>>> check_scalar(0.5, "delta", float, min_val=0, max_val=1, include_boundaries="neither")
0.5
>>> check_scalar(True, "eps", float)
Traceback (most recent call last):
    ...
TypeError: eps must be a real number, got bool True
"""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["check_scalar", "check_bool", "check_array", "as_real_array", "is_torch_tensor", "no_duplicate_keys",
           "DuplicateKeyError"]

_BOUNDARIES = ("both", "left", "right", "neither")


def _describe(x) -> str:
    return f"{type(x).__name__} {x!r}"


def check_scalar(x, name: str, target_type, *, min_val=None, max_val=None,
                 include_boundaries: str = "both", finite: bool = True):
    """Validate a scalar parameter and return it as a Python ``int`` or ``float``.

    Parameters
    ----------
    x : object
        The value to check.
    name : str
        The parameter's name, as the error message shows it (may carry an explanation:
        ``"N (hidden size)"``).
    target_type : {int, float}
        ``int`` (or ``numbers.Integral``): Python or NumPy integers, returned as ``int``.
        ``float`` (or ``numbers.Real``): any real number but ``bool``, returned as ``float``.
    min_val, max_val : float, optional
        Bounds of the accepted range (``None``: unbounded on that side).
    include_boundaries : {"both", "left", "right", "neither"}
        Whether ``min_val`` / ``max_val`` themselves are accepted.
    finite : bool
        For real parameters: refuse ``±inf`` (NaN is always refused).

    Returns
    -------
    int or float
        ``x`` converted to the Python type.

    Raises
    ------
    TypeError
        ``x`` is a ``bool``, is not a number, or is not integral where an integer is needed.
    ValueError
        ``x`` is NaN, infinite (with ``finite=True``) or outside the range.
    """
    if include_boundaries not in _BOUNDARIES:
        raise ValueError(f"include_boundaries must be one of {_BOUNDARIES}, got {include_boundaries!r}")
    integral = target_type in (int, numbers.Integral)
    if not integral and target_type not in (float, numbers.Real):
        raise ValueError(f"target_type must be int or float, got {target_type!r}")
    if isinstance(x, (bool, np.bool_)):
        what = "an integer" if integral else "a real number"
        raise TypeError(f"{name} must be {what}, got {_describe(x)}")
    if integral:
        if not isinstance(x, numbers.Integral):
            raise TypeError(f"{name} must be an integer, got {_describe(x)}")
        value = int(x)
    else:
        if not isinstance(x, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {_describe(x)}")
        value = float(x)
        if math.isnan(value):
            raise ValueError(f"{name} is NaN, must be a real number")
        if finite and math.isinf(value):
            raise ValueError(f"{name} == {value}, must be finite")
    left = include_boundaries in ("both", "left")
    right = include_boundaries in ("both", "right")
    if min_val is not None and (value < min_val or (value == min_val and not left)):
        raise ValueError(f"{name} == {value}, must be {'>=' if left else '>'} {min_val}")
    if max_val is not None and (value > max_val or (value == max_val and not right)):
        raise ValueError(f"{name} == {value}, must be {'<=' if right else '<'} {max_val}")
    return value


def check_bool(x, name: str) -> bool:
    """``x`` as a Python ``bool``; :class:`TypeError` for anything but ``True``/``False``.

    Examples
    --------
    >>> check_bool(np.True_, "learned_readout")
    True
    >>> check_bool(1, "learned_readout")
    Traceback (most recent call last):
        ...
    TypeError: learned_readout must be True or False, got int 1
    """
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_describe(x)}")
    return bool(x)


def check_array(x, name: str, *, min_val=None, max_val=None, include_boundaries: str = "both",
                allow_inf: bool = False, allow_neg_inf: bool = False, allow_empty: bool = True,
                what: str = "") -> np.ndarray:
    """``x`` as a float64 NumPy array whose values are checked; scalars give 0-d arrays.

    Parameters
    ----------
    x : array_like
        Numbers (a scalar, a nested list, a NumPy array or a torch tensor).
    name : str
        The parameter's name in the error message.
    min_val, max_val, include_boundaries
        As in :func:`check_scalar`, for every entry.
    allow_inf, allow_neg_inf : bool
        Accept ``±inf`` (``allow_inf``) or only ``-inf`` (``allow_neg_inf``, e.g. the log of a zero).
        NaN is always refused.
    allow_empty : bool
        Accept an array with no entries.
    what : str
        What the values are, appended to messages (``"spectral norms are >= 0"``).

    Raises
    ------
    TypeError
        ``x`` is a ``bool`` or not numeric.
    ValueError
        ``x`` is complex, empty (with ``allow_empty=False``), holds NaN, a forbidden infinity, or a
        value outside the range.

    Examples
    --------
    >>> check_array([0.5, 2.0], "sigma", min_val=0).tolist()
    [0.5, 2.0]
    >>> check_array([1.0, -1.0], "sigma", min_val=0, what="singular values are >= 0")
    Traceback (most recent call last):
        ...
    ValueError: sigma contains -1.0, must be >= 0 (singular values are >= 0)
    """
    if include_boundaries not in _BOUNDARIES:
        raise ValueError(f"include_boundaries must be one of {_BOUNDARIES}, got {include_boundaries!r}")
    if type(x) in _FLOAT_SCALARS and _valid_float(float(x), min_val, max_val, include_boundaries):
        # the common case, a valid float, without the array machinery (the library's bounds take one
        # number at a time inside the chapters' checks); anything else is checked, or refused, below
        return np.asarray(x, dtype=np.float64)
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be numeric, got {_describe(x)}")
    A = as_real_array(x, name)
    if A.dtype.kind == "b":
        raise TypeError(f"{name} must be numeric, got a boolean array")
    a = A.astype(np.float64, copy=False)
    tail = f" ({what})" if what else ""
    if a.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty{tail}")
    if np.isnan(a).any():
        raise ValueError(f"{name} contains NaN{tail}")
    inf = np.isinf(a)
    if inf.any() and not allow_inf:
        bad = a[inf & ((a > 0) | (not allow_neg_inf))]
        if bad.size:
            raise ValueError(f"{name} contains {bad.ravel()[0]}, must be finite{tail}")
    left = include_boundaries in ("both", "left")
    right = include_boundaries in ("both", "right")
    if min_val is not None:
        low = a[(a < min_val) | ((a == min_val) & (not left))]
        if low.size:
            raise ValueError(f"{name} contains {low.ravel()[0]}, must be {'>=' if left else '>'} {min_val}{tail}")
    if max_val is not None:
        high = a[(a > max_val) | ((a == max_val) & (not right))]
        if high.size:
            raise ValueError(f"{name} contains {high.ravel()[0]}, must be {'<=' if right else '<'} {max_val}{tail}")
    return a


#: The scalar types :func:`check_array` accepts without building masks (``bool`` is not among them).
_FLOAT_SCALARS = (float, np.float64)


def _valid_float(v: float, min_val, max_val, include_boundaries: str) -> bool:
    """``v`` finite and in range: what :func:`check_array` accepts in a float (the fast path's test)."""
    if not math.isfinite(v):
        return False
    if min_val is not None and (v < min_val or (v == min_val and include_boundaries not in ("both", "left"))):
        return False
    return max_val is None or not (v > max_val or (v == max_val and include_boundaries not in ("both", "right")))


def is_torch_tensor(x) -> bool:
    """``True`` for a ``torch.Tensor`` (without importing torch when it is not loaded)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "dtype")


def _torch_to_numpy(t, name: str) -> np.ndarray:
    import torch

    t = t.detach()
    if t.is_complex():
        raise ValueError(f"{name} must be real; got a complex tensor ({t.dtype})")
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)  # exact widening (NumPy has no bfloat16)
    try:
        t = t.cpu()
    except Exception as exc:  # e.g. a tensor on the "meta" device holds no values
        raise ValueError(f"{name} cannot be copied to the CPU (device {t.device}): "
                         f"{' '.join(str(exc).split())[:200]}") from None
    try:
        return t.numpy()
    except TypeError:  # e.g. float8 / quantised dtypes
        raise ValueError(f"{name} has dtype {t.dtype}, which has no NumPy equivalent") from None


def as_real_array(x, name: str = "array", *, allow_integer: bool = True) -> np.ndarray:
    """``x`` as a real NumPy array (dtype kept: float16/32/64, or integer/bool if allowed).

    Raises :class:`ValueError` (one line: what is wrong and what is supported) for complex, object,
    string and — with ``allow_integer=False`` — integer or boolean input. Finiteness is *not*
    checked here (callers check it once they know the dtype they compute in, or use
    :func:`check_array`).

    Examples
    --------
    >>> as_real_array([[1, 2], [3, 4]], "W").dtype.kind
    'i'
    >>> as_real_array([1j], "W")
    Traceback (most recent call last):
        ...
    ValueError: W must be real; complex arrays (complex128) are not supported
    """
    if is_torch_tensor(x):
        A = _torch_to_numpy(x, name)
    else:
        try:
            A = np.asarray(x)
        except Exception as exc:
            raise ValueError(f"{name} cannot be converted to an array: {' '.join(str(exc).split())}") from None
    kind = A.dtype.kind
    if kind == "c":
        raise ValueError(f"{name} must be real; complex arrays ({A.dtype}) are not supported")
    if kind in "OSUVMm":
        raise ValueError(f"{name} must be a numeric array, got dtype {A.dtype}")
    if kind in "iub" and not allow_integer:
        raise ValueError(f"{name} has dtype {A.dtype}; weights must be floating point "
                         "(float16, bfloat16, float32 or float64)")
    return A


class DuplicateKeyError(ValueError):
    """A JSON object repeats a key (raised by :func:`no_duplicate_keys`); the key is its argument."""


def no_duplicate_keys(pairs) -> dict:
    """``object_pairs_hook`` for ``json.loads``: a JSON object with a repeated key is an error (a plain
    ``dict`` keeps the last entry silently). Used for checkpoint headers, configs and results files.

    >>> import json
    >>> json.loads('{"a": 1, "a": 2}', object_pairs_hook=no_duplicate_keys)
    Traceback (most recent call last):
        ...
    bounds_lib.core.validation.DuplicateKeyError: a
    """
    d = {}
    for k, v in pairs:
        if k in d:
            raise DuplicateKeyError(k)
        d[k] = v
    return d
