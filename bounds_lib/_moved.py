"""Old import paths of names that moved to another module, kept working for one release.

A module whose functions moved elsewhere sets its module-level ``__getattr__`` (PEP 562) with
:func:`moved_to`; the new home is imported only when an old name is used (so no import cycle), and
each use warns with a :class:`DeprecationWarning` that names the new path.
"""
from __future__ import annotations

import importlib
import warnings


def moved_to(module_name: str, names, new_module: str):
    """A module ``__getattr__`` that resolves ``names`` from ``new_module`` with a deprecation warning.

    Examples
    --------
    >>> __getattr__ = moved_to("bounds_lib.peeling", {"falsify_rounding"}, "bounds_lib.checks")
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     f = __getattr__("falsify_rounding")
    >>> str(w[0].message)
    'bounds_lib.peeling.falsify_rounding moved to bounds_lib.checks.falsify_rounding'
    """
    names = frozenset(names)

    def __getattr__(name):
        if name in names:
            warnings.warn(f"{module_name}.{name} moved to {new_module}.{name}", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(new_module), name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__
