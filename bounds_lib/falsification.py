"""Former home of the falsification harness; it now lives in :mod:`bounds_lib.checks`.

``from bounds_lib.falsification import Falsification, falsify`` keeps working until the next release
(a thin re-export); new code imports from :mod:`bounds_lib.checks`.
"""
from __future__ import annotations

from .checks import VIOLATION_TOL, Falsification, adversarial_search, falsify, power_check

__all__ = ["VIOLATION_TOL", "Falsification", "adversarial_search", "falsify", "power_check"]
