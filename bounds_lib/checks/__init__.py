"""The checks and witnesses of the book (Chapters 1–5): the falsification harness and the chapters' checks.

A check of an inequality is only evidence if it could have failed: random draws, an optimiser from the
best of them, and a power check against a deliberately weakened bound. The modules:

* :mod:`~bounds_lib.checks.harness` — the harness: :class:`~bounds_lib.checks.harness.Falsification`,
  :class:`~bounds_lib.checks.harness.CheckResult`, :func:`~bounds_lib.checks.harness.falsify`,
  :func:`~bounds_lib.checks.harness.adversarial_search`, :func:`~bounds_lib.checks.harness.power_check`;
* :mod:`~bounds_lib.checks.ch1_norms` — Chapter 1, the inequalities between the norms
  (:data:`bounds_lib.theory.norms.NORM_INEQUALITIES`);
* :mod:`~bounds_lib.checks.ch2_split` — Chapter 2, the split lemmas of :mod:`bounds_lib.theory.interpolation`;
* :mod:`~bounds_lib.checks.ch3_single_head` — Chapter 3, softmax, logits, Λ, parameter perturbation and
  composition for a single head (:mod:`bounds_lib.theory.propagation`);
* :mod:`~bounds_lib.checks.ch3_multihead` — Chapter 3, the multi-head surrogate (Λ, γ, composition);
* :mod:`~bounds_lib.checks.ch4_peeling` — Chapter 4, the rounding and shells lemmas of
  :mod:`bounds_lib.theory.peeling`;
* :mod:`~bounds_lib.checks.ch5_theorem` — Chapter 5, the orders table against the theorem (the log factor,
  the Frobenius row, SymPy claims on the constants and the regimes);
* :mod:`~bounds_lib.checks.orders` — the asymptotic orders and closed forms of Chapters 1, 2, 5 and 6 (SymPy);
* :mod:`~bounds_lib.checks.witnesses` — the :class:`~bounds_lib.checks.witnesses.Witness` type and the
  witnesses of Chapters 1, 2, 4 and 5: explicit inputs on which a bound is attained;
* :mod:`~bounds_lib.checks.ch3_witnesses` — the witnesses of Chapter 3.

The public names of the harness and of the chapters' checks (``__all__``) are re-exported here, as the
chapters call them (``from bounds_lib import checks as CK``; ``CK.check_split(rng)``); the witnesses and the
SymPy checks of :mod:`~bounds_lib.checks.orders` are imported from their modules.
"""
from __future__ import annotations

from .ch1_norms import falsify_norm_inequalities, norm_inequality_ratios
from .ch2_split import TAU_GAP, adversarial_split, check_split, falsify_split
from .ch3_multihead import (adversarial_multihead_gamma, check_multihead_composition, check_multihead_gamma,
                            check_multihead_gamma_optimiser, falsify_multihead_composition, falsify_multihead_gamma,
                            falsify_multihead_layer)
from .ch3_single_head import (adversarial_layer_lipschitz, adversarial_parameter_perturbation, check_composition,
                              check_layer_lipschitz, check_logits, check_parameter_perturbation, check_softmax,
                              falsify_composition, falsify_layer_lipschitz, falsify_logits,
                              falsify_parameter_perturbation, falsify_softmax)
from .ch4_peeling import check_shells, falsify_rounding, falsify_shell_inflation, rounding_ratio
from .ch5_theorem import (LOG_FACTOR_DOMAIN, check_log_factor, check_orders_in_depth, check_regime_slopes,
                          check_theorem_constants, falsify_frobenius_row, falsify_log_factor, frobenius_row_bound,
                          frobenius_row_function, log_factor_functions, log_factors)
from .harness import (OPTIMISER_FTOL, OPTIMISER_XTOL, TINY_DENOMINATOR, VIOLATION_TOL, CheckResult, Falsification,
                      adversarial_search, falsify, power_check)

__all__ = [
    "VIOLATION_TOL",
    "OPTIMISER_XTOL",
    "OPTIMISER_FTOL",
    "TINY_DENOMINATOR",
    "TAU_GAP",
    "Falsification",
    "CheckResult",
    "adversarial_search",
    "falsify",
    "power_check",
    "norm_inequality_ratios",
    "falsify_norm_inequalities",
    "falsify_split",
    "adversarial_split",
    "check_split",
    "falsify_softmax",
    "falsify_logits",
    "falsify_layer_lipschitz",
    "check_softmax",
    "check_logits",
    "check_layer_lipschitz",
    "falsify_parameter_perturbation",
    "falsify_multihead_gamma",
    "adversarial_layer_lipschitz",
    "adversarial_parameter_perturbation",
    "check_parameter_perturbation",
    "falsify_composition",
    "falsify_multihead_layer",
    "adversarial_multihead_gamma",
    "falsify_multihead_composition",
    "check_multihead_gamma",
    "check_multihead_gamma_optimiser",
    "check_composition",
    "check_multihead_composition",
    "rounding_ratio",
    "falsify_rounding",
    "falsify_shell_inflation",
    "check_shells",
    "LOG_FACTOR_DOMAIN",
    "log_factors",
    "log_factor_functions",
    "frobenius_row_function",
    "frobenius_row_bound",
    "falsify_log_factor",
    "check_log_factor",
    "falsify_frobenius_row",
    "check_theorem_constants",
    "check_regime_slopes",
    "check_orders_in_depth",
]
