"""The lowest layer: what every other part of the library uses and nothing of the library below it.

* :mod:`bounds_lib.core.validation` — one input rule for every function (TypeError for a wrong type,
  ValueError for a wrong value);
* :mod:`bounds_lib.core.logspace` — the log-space sum of the bounds;
* :mod:`bounds_lib.core.style` — the book's figure style (``book.mplstyle``);
* ``bounds_lib.core.glue`` — ``glue`` that also works in plain Jupyter;
* :mod:`bounds_lib.core.interrupts` — stopping signals held off and raised where no lock is held.
* :mod:`bounds_lib.core.facts` — a report's versions and platform, read cheaply.
"""
