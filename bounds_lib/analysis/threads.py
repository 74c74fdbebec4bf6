"""How many threads BLAS and OpenMP use while the library decomposes (Chapter 6, at scale).

One policy for the API (``threads=`` of :func:`~bounds_lib.analysis.spectra.compute_spectra` and
:func:`~bounds_lib.analysis.scoring.analyze`, default 1), the command (``--threads``, default 1) and the
worker processes of a pool: :func:`blas_threads`. The matrices are small, and a threaded BLAS beside
another busy process can be many times slower: its threads wait for each other by spinning. A limit reaches
only the libraries loaded when it is set, so a library loaded inside the block (SciPy's own OpenBLAS, on
the first blocked QR of a large matrix) is given the block's limit where it is loaded
(:func:`limit_new_libraries`).
"""
from __future__ import annotations

from contextlib import contextmanager

__all__ = ["blas_threads", "limit_new_libraries"]

#: The open :func:`blas_threads` blocks, innermost last: ``[threads, the limits set inside the block]``.
_OPEN: list = []


@contextmanager
def blas_threads(threads: int):
    """BLAS (and OpenMP) limited to ``threads`` threads inside the block; ``0`` leaves them as they are.

    NumPy's BLAS library is loaded first: threadpoolctl limits only libraries already loaded, so a limit
    set before ``numpy.linalg`` was first imported would limit nothing. A library loaded later inside the
    block gets the limit from :func:`limit_new_libraries`, which the code that loads one calls. The limits
    in force before are restored at the end, the libraries loaded inside the block included; a limit the
    environment set before import (``OPENBLAS_NUM_THREADS=1``) is a limit as well."""
    if threads == 0:
        yield
        return
    import numpy.linalg  # noqa: F401  (NumPy's OpenBLAS)
    from threadpoolctl import threadpool_limits

    block = [threads, []]
    with threadpool_limits(threads):
        _OPEN.append(block)
        try:
            yield
        finally:
            _OPEN.remove(block)
            for inner in reversed(block[1]):  # a library loaded inside the block: back to its own default
                inner.restore_original_limits()


def limit_new_libraries() -> None:
    """Give the thread pools loaded since the innermost open :func:`blas_threads` block began that block's
    limit (nothing outside a block, or where every pool is within it already).

    Called right after an import that can load a threaded library: ``scipy.linalg`` loads SciPy's own
    OpenBLAS, which starts with one thread per core whatever limit NumPy's has. Measured on the 2-core
    reference machine with both cores busy: ``--jobs 1`` on one 1.1B-shaped layer took more than 150 s
    (SciPy's two threads spinning, 152 s of CPU) against 24 s with one thread
    (``benchmarks/CONTENTION.md``)."""
    if not _OPEN:
        return
    from threadpoolctl import threadpool_info, threadpool_limits

    threads, inner = _OPEN[-1]
    if any(info["num_threads"] > threads for info in threadpool_info()):
        inner.append(threadpool_limits(threads))


def _blas_threads():
    """The caller's BLAS thread count (what a worker uses, so that its numbers are the caller's)."""
    try:
        from threadpoolctl import threadpool_info

        counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
        return min(counts) if counts else None
    except Exception:  # pragma: no cover - threadpoolctl is a dependency
        return None
