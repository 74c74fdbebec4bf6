"""The mathematics of Chapters 1–5: every bound as a function of its inputs, nothing else.

* :mod:`bounds_lib.theory.norms` — Schatten quantities, (2,1)/(1,1) norms, numerical rank (Chapter 1);
* :mod:`bounds_lib.theory.model` — the paper's single-head Transformer in NumPy (Chapter 1);
* :mod:`bounds_lib.theory.interpolation` — matrix parameter interpolation: the split and its covers (Chapter 2);
* :mod:`bounds_lib.theory.propagation` — layerwise propagation: Λ, α, γ, the scale K (Chapter 3);
* :mod:`bounds_lib.theory.peeling` — post hoc peeling: the grid of p, 𝒯(W;p), shells, union costs (Chapter 4);
* :mod:`bounds_lib.theory.orders` — the leading orders of the bounds as SymPy expressions (Chapters 2, 4, 5);
* :mod:`bounds_lib.theory.theorem` — the corrected main theorem's per-matrix term and Dudley factor (Chapter 5).

The checks and witnesses of these statements live one layer up, in :mod:`bounds_lib.checks`.
"""
