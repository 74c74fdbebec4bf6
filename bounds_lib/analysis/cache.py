"""An explicit store of spectra keyed by the content of the weights (Chapter 6).

A :class:`SpectraCache` passed to several :func:`bounds_lib.analysis.spectra.compute_spectra` calls (or to
the kernel, :func:`bounds_lib.analysis.kernel.layer_spectra`) makes a second pass over the same weights free;
it never changes a result.
"""
from __future__ import annotations

import threading

import numpy as np

__all__ = ["SpectraCache"]


class SpectraCache:
    """Explicit store of spectra keyed by the *content* of the weights, the mode and the dtype.

    Pass the same cache to several :func:`~bounds_lib.analysis.spectra.compute_spectra` calls: identical
    tensors (same bytes) are never decomposed twice — e.g. ``M_in``/``M_out`` when switching between
    clean and paper mode.
    The key is a BLAKE2b digest of the bytes, shape and dtype of every input tensor, so a hit returns
    exactly what the computation would. ``hits`` and ``misses`` count lookups.

    Examples
    --------
    Four matrix groups per layer; in paper mode only the two head-product groups are new:

    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> cache = SpectraCache()
    >>> clean = compute_spectra(sd, config=cfg, cache=cache)
    >>> paper = compute_spectra(sd, config=cfg, mode="paper", cache=cache)
    >>> cache.misses, cache.hits
    (12, 4)
    """

    def __init__(self):
        self._store = {}
        self._lock = threading.Lock()  # compute_spectra(jobs > 1) looks up from worker threads
        self.hits = 0
        self.misses = 0

    @staticmethod
    def digest(*arrays, tag: str = "") -> str:
        import hashlib  # here: a run without a cache does not load OpenSSL's hashes

        h = hashlib.blake2b(digest_size=20)
        h.update(tag.encode())
        for A in arrays:
            A = np.ascontiguousarray(A)
            h.update(repr((A.shape, A.dtype.str)).encode())
            h.update(A.view(np.uint8).reshape(-1))
        return h.hexdigest()

    def get_or_compute(self, key, compute):
        with self._lock:
            if key in self._store:
                self.hits += 1
                return self._store[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._store.setdefault(key, value)
        return value

    def __len__(self):
        return len(self._store)
