"""Analysing a checkpoint (Chapter 6): spectra, the scheduler that spreads them over workers, scoring.

The kernel computes one part's spectra, the scheduler runs kernels over processes, threads or a Dask
cluster, :mod:`bounds_lib.analysis.spectra` orchestrates both, and :mod:`bounds_lib.analysis.scoring`
turns spectra into the paper's proxies; :mod:`bounds_lib.analysis.corrected` evaluates Chapter 5's
theorem on them, :mod:`bounds_lib.analysis.report` and :mod:`bounds_lib.analysis.plotting` make
Chapter 6's tables and figures.
"""
