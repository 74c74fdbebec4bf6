"""The spectra of one layer, or of one part of it — the kernel of the paper's Section 6 (Chapter 6).

:func:`layer_spectra` decomposes the matrices a :class:`~bounds_lib.checkpoints.layers.LayerWeights` holds and
returns one :class:`MatrixSpectrum` per matrix: for every head's ``QK_h`` and ``Ṽ_h`` and every
``M_in`` and ``M_out`` all singular values plus the (2,1) and (1,1) norms. :func:`part_spectra` reads
one part of a layer (:func:`~bounds_lib.checkpoints.layers.layer_parts`) from a checkpoint and decomposes it:
the unit of work that :mod:`bounds_lib.analysis.parallel` schedules and
:func:`bounds_lib.analysis.spectra.compute_spectra` runs over a whole model. Two modes:

* ``"clean"`` — a head product ``P = A Bᵀ`` (``A, B`` of shape N×d_h) has the thin QR factors
  ``A = Q_A R_A``, ``B = Q_B R_B``, so ``P = Q_A (R_A R_Bᵀ) Q_Bᵀ`` and its singular values are those
  of the d_h×d_h core ``R_A R_Bᵀ`` (:func:`head_product_spectra`); the other ``N − d_h`` are exact
  zeros, and so are core values below the numerical-rank tolerance of :mod:`bounds_lib.theory.norms`.
  Column norms of ``P`` are the row norms of ``B R_Aᵀ``, so the (2,1) norm needs no N×N product;
  the (1,1) norm does.
* ``"paper"`` — the explicit N×N products and a full SVD, exactly as the authors' released code:
  ``q[hs,:]ᵀ k[hs,:]`` and ``v[hs,:]ᵀ (oᵀ)[hs,:]`` in float64. Its ``S_p`` for small ``p > 0``
  includes the ~1e-15 numerical zeros (each adds ``σ^p``, ~0.16 at ``p = 1/19``).

``M_in`` and ``M_out`` are full-rank dense matrices and have the same spectra in both modes. Weights
of extreme magnitude are scaled by powers of two before any product (exact). A part too large for a
worker's memory is factored lean (``part_spectra(..., lean=True)``): a feed-forward matrix by TSQR from
its stored precision, the attention part in two halves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..checkpoints import LayerWeights, TensorSource, part_expert, part_tensor_names
from ..checkpoints.layers import _read_layer, part_kind
from ..theory.norms import _SAFE_EXPONENT, RANK_RTOL, _pow2_scaled, numerical_rank
from .cache import SpectraCache
from .devices import resolve_device, svdvals
from .threads import limit_new_libraries

__all__ = [
    "MODES",
    "MatrixSpectrum",
    "head_product_spectra",
    "layer_spectra",
    "part_spectra",
]

#: Spectra conventions — ``"clean"`` (QR cores, exact zeros) and ``"paper"`` (explicit N×N, released).
MODES = ("clean", "paper")
#: Bytes in a mebibyte.
MB = 2**20
#: Rows of the tall matrix widened at a time by ``_lean_dense`` (at most this many bytes).
_CHUNK_BYTES = 16 * MB
_EXACT = {"F16": "float16", "float16": "float16", "BF16": "float32", "bfloat16": "float32", "F32": "float32",
          "float32": "float32"}


@dataclass(frozen=True)
class MatrixSpectrum:
    """All singular values of one matrix (descending, ``min(rows, cols)`` of them) and two norms.

    ``matrix_type`` is one of :data:`bounds_lib.theory.model.MULTI_HEAD_MATRIX_TYPES`; ``head`` is ``-1`` for
    ``M_in`` / ``M_out``; ``expert`` is the feed-forward expert of a mixture-of-experts layer whose
    ``M_in`` / ``M_out`` this is (Mixtral), ``None`` for every other matrix. Derived quantities are
    properties so that they always agree with ``sigma``.
    """

    layer: int
    head: int
    matrix_type: str
    shape: tuple
    sigma: np.ndarray
    norm_21: float
    norm_11: float
    expert: int | None = None

    def __post_init__(self):
        # spectra are shared (SpectraCache, prefixes, rescoring): hand them out read-only
        s = np.asarray(self.sigma, dtype=np.float64).view()  # a view: its flag cannot be turned back on
        s.flags.writeable = False                                 # once the computed array is frozen too
        object.__setattr__(self, "sigma", s)

    @property
    def sigma1(self) -> float:
        """Spectral norm ``σ₁ = C₂``."""
        return float(self.sigma[0])

    @property
    def rank(self) -> int:
        """Numerical rank ``S_0`` (tolerance of the released code)."""
        return numerical_rank(self.sigma)

    @property
    def frobenius(self) -> float:
        """``‖W‖_F = σ₁·√Σ(σ_i/σ₁)²`` — scaled by ``σ₁``, so that no square overflows or underflows."""
        s0 = self.sigma[0]
        return 0.0 if s0 == 0 else float(s0 * np.sqrt(np.sum((self.sigma / s0) ** 2)))

    @property
    def nuclear(self) -> float:
        return float(np.sum(self.sigma))

    @property
    def stable_rank(self) -> float:
        """``‖W‖_F² / ‖W‖₂² = Σ(σ_i/σ₁)²`` (0 for a zero matrix)."""
        s0 = self.sigma[0]
        return 0.0 if s0 == 0 else float(np.sum((self.sigma / s0) ** 2))

    def scaled(self, s: float) -> "MatrixSpectrum":
        """The spectrum of ``s·W`` (``s > 0``): σ and both norms times ``s``."""
        return replace(self, sigma=self.sigma * s, norm_21=self.norm_21 * s, norm_11=self.norm_11 * s)

    def label(self) -> str:
        """``"L3.QK.h5"`` (layer, matrix type, head), ``"L3.M_in"``, or ``"L3.M_in.e2"`` (expert 2)."""
        return (f"L{self.layer}.{self.matrix_type}" + (f".h{self.head}" if self.head >= 0 else "")
                + (f".e{self.expert}" if self.expert is not None else ""))


# --------------------------------------------------------------------------------------------
# One layer's matrices
# --------------------------------------------------------------------------------------------


def _stack_heads(W, n, d):
    """``W`` (N × n·d) → (n, N, d) stack of column blocks."""
    N = W.shape[0]
    return np.ascontiguousarray(W.reshape(N, n, d).transpose(1, 0, 2))


def head_product_spectra(A, B, groups=None, *, entrywise=True):
    """Singular values and norms of ``P_h = A_h B_{g(h)}ᵀ`` through the d×d cores of thin QRs (Chapter 6).

    With ``A_h = Q_A R_A`` and ``B_g = Q_B R_B``, ``P_h = Q_A (R_A R_Bᵀ) Q_Bᵀ`` has the singular values of
    the small core ``R_A R_Bᵀ``; no N×N product is formed for them or for the (2,1) norm.

    Parameters
    ----------
    A : ndarray, shape (H, N, d)
        Query-side (or value-side) column blocks, one per head.
    B : ndarray, shape (G, N, d)
        Key-side (or output-side) column blocks, one per key/value group.
    groups : array_like of int, shape (H,), optional
        Head → index into ``B`` (default: the identity, ``G = H``; grouped-query attention repeats).
    entrywise : bool
        Also compute the (1,1) norms, which need the explicit products (in chunks of ~64 MB).

    Returns
    -------
    sigma : ndarray, shape (H, min(N, d))
        Singular values of each ``P_h``, descending (the other ``N − d`` are zero).
    norm_21 : ndarray, shape (H,)
        ``Σ_j ‖P_h[:, j]‖₂`` (row norms of ``B R_Aᵀ``).
    norm_11 : ndarray, shape (H,)
        ``Σ|P_h|``; ``NaN`` when ``entrywise=False``.

    Examples
    --------
    A rank-one product ``u vᵀ`` has one singular value ``‖u‖‖v‖`` and (2,1) norm ``‖u‖ Σ|v_j|``:

    >>> import numpy as np
    >>> u, v = np.array([[3.0], [4.0], [0.0]]), np.array([[1.0], [-2.0], [2.0]])
    >>> sigma, n21, n11 = head_product_spectra(u[None], v[None])
    >>> float(sigma[0, 0]), float(n21[0]), float(n11[0])
    (15.0, 25.0, 35.0)
    """
    H = A.shape[0]
    groups = np.arange(H) if groups is None else np.asarray(groups)
    # A may be any strided view (the QR copies it once); the products below see C-ordered stacks
    # whatever the caller's strides, so that their BLAS calls, hence their bits, are always the same
    B = np.ascontiguousarray(B)
    R_A = np.ascontiguousarray(np.linalg.qr(A, mode="r"))  # (H, r, d)
    R_B = np.linalg.qr(B, mode="r")                      # (G, r, d)
    one_to_one = B.shape[0] == H and np.array_equal(groups, np.arange(H))  # B[groups] would be a copy of B
    cores = R_A @ np.swapaxes(R_B if one_to_one else R_B[groups], 1, 2)  # (H, r, r)
    sigma = np.linalg.svd(cores, compute_uv=False)       # (H, r)
    cols = (B if one_to_one else B[groups]) @ np.swapaxes(R_A, 1, 2)  # (H, N, r): row j ↦ column j of P_h
    norm_21 = np.sum(np.linalg.norm(cols, axis=2), axis=1)
    if entrywise:  # explicit products, in chunks of at most ~64 MB
        A = np.ascontiguousarray(A)
        N = A.shape[1]
        step = max(1, int(2**23 // max(N * N, 1)))
        parts = []
        for i in range(0, H, step):
            P = A[i:i + step] @ np.swapaxes(B[groups[i:i + step]], 1, 2)
            parts.append(np.abs(P, out=P).sum(axis=(1, 2)))
        norm_11 = np.concatenate(parts)
    else:
        norm_11 = np.full(H, np.nan)
    return sigma, norm_21, norm_11


def _clean_sigma(core_sigma, n_full):
    """Pad core singular values with exact zeros to ``n_full`` and zero those below the rank tolerance."""
    s = np.zeros(n_full, dtype=np.float64)
    k = min(core_sigma.size, n_full)
    s[:k] = core_sigma[:k]
    tol = RANK_RTOL * n_full * max(float(s[0]), 1.0)
    s[s <= tol] = 0.0
    return s


def _unscale(sigma, n21, n11, e):
    """Spectrum and norms of ``2^e·W`` from those of ``W``, in float64; check that they are finite."""
    sigma = np.asarray(sigma, dtype=np.float64)
    if e:
        with np.errstate(over="ignore"):  # a result beyond float64 becomes inf, caught by _check_finite
            sigma, n21, n11 = np.ldexp(sigma, e), np.ldexp(float(n21), e), np.ldexp(float(n11), e)
    return sigma, float(n21), float(n11)


def _dense_spectrum(W, device=None):
    """``(σ, ‖W‖_{2,1}, ‖W‖_{1,1})`` of a dense matrix. The SVD is of the tall one of ``W`` and ``Wᵀ`` (the
    same singular values): LAPACK's path for a wide matrix (an LQ factorization first) took 1.1–1.7× the
    tall path's time on OpenBLAS, e.g. 67 against 59 ms for a 384×1536 ``M_in``
    (``tests/test_kernel.py::test_a_wide_matrix_is_decomposed_tall``)."""
    W, e = _pow2_scaled(W)
    sigma = svdvals(W.T if W.shape[0] < W.shape[1] else W, device)
    return _unscale(sigma, np.sum(np.linalg.norm(W, axis=0)), np.sum(np.abs(W)), e)


def _check_finite(res, layer, matrix_type, dtype_name):
    for s, n21, n11 in res:
        if not (np.all(np.isfinite(s)) and math.isfinite(n21) and not math.isinf(n11)):
            raise ValueError(f"layer {layer} {matrix_type}: singular values or norms exceed the float64 range "
                             f"(weights too large to analyse, computed in {dtype_name})")


def _frozen(compute):
    """``compute()`` with its arrays made read-only: results are shared (a cache, every MatrixSpectrum)."""
    res = compute()
    for item in (res if isinstance(res, list) else [res]):
        item[0].flags.writeable = False
    return res


def _head_spectra(matrix_type, A_full, B_full, explicit, spec, mode, entrywise, device) -> list:
    """``[(sigma, norm_21, norm_11)]`` of every head's ``QK_h`` (``matrix_type="QK"``) or ``Ṽ_h`` (``"V"``).

    ``A_full`` (N × H·d_h) is the query or value side, ``B_full`` (N × G·d_h) the key or output side, in
    head-major columns; ``explicit(h)`` is the released N×N product of head ``h`` (paper mode)."""
    H, d, N = spec.n_heads, spec.head_dim, spec.hidden
    groups = np.array([spec.kv_group(h) for h in range(H)])
    As, ea = _pow2_scaled(A_full)
    Bs, eb = _pow2_scaled(B_full)
    g = groups if matrix_type == "QK" else np.arange(H)
    if mode == "paper":
        res = []
        for h in range(H):
            if ea == eb == 0:
                P = explicit(h)  # the released products, bit for bit
            else:
                P = As[:, h * d:(h + 1) * d] @ Bs[:, g[h] * d:(g[h] + 1) * d].T
            s, n21, n11 = _dense_spectrum(P, device)  # (1,1) norms only when asked, as in clean mode
            res.append(_unscale(s, n21, n11 if entrywise else np.nan, ea + eb))
        return res
    A = As.reshape(N, H, d).transpose(1, 0, 2)  # a view: head_product_spectra copies what it needs once
    B = _stack_heads(Bs, Bs.shape[1] // d, d)
    sig, n21, n11 = head_product_spectra(A, B, groups if matrix_type == "QK" else None, entrywise=entrywise)
    res = []
    for h in range(H):
        s_h, a, b = _unscale(sig[h], n21[h], n11[h], ea + eb)
        res.append((_clean_sigma(s_h, N), a, b))
    return res


def layer_spectra(lw: LayerWeights, mode: str = "clean", *, cache: SpectraCache | None = None,
                  entrywise: bool = True, on_step=None, device=None, attention=("QK", "V")) -> list:
    """All :class:`MatrixSpectrum` of the parts of one layer that ``lw`` holds, in the order of its parts.

    For a whole layer (:func:`~bounds_lib.checkpoints.layers.layer_parts`): H ``QK``, H ``Ṽ`` (the part
    ``"attention"``), then ``M_in``, ``M_out``. A :class:`~bounds_lib.checkpoints.layers.LayerWeights` read
    with ``parts=`` gives the spectra of those parts only, the same numbers as in the whole layer.
    ``on_step(name)`` is called after each matrix group (``"QK"``, ``"V"``, ``"M_in"``, ``"M_out"``).
    ``attention`` names the attention groups to compute (``("QK",)`` needs only ``Wq``, ``Wk``;
    ``("V",)`` only ``Wv``, ``Wo``: :func:`part_spectra` computes a large layer's two groups one
    after the other, each with only its own projections in memory).
    ``device`` (:func:`bounds_lib.analysis.devices.resolve_device`: ``"cpu"``, ``"cuda"``, ``"auto"``, …) runs
    the dense SVDs there (``M_in``, ``M_out``, the paper mode's N×N products); the numbers agree with
    the CPU's within :func:`bounds_lib.analysis.devices.spectra_agree`.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    device = resolve_device(device)
    spec = lw.spec
    H, Hk, d, N = spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.hidden
    dt = lw.dtype.name
    out = []

    def cached(tag, arrays, compute, by_mode=True):
        if cache is None:
            return _frozen(compute)
        # the device is part of the key: a cache never changes a result, not even in the last bits
        key = f"{tag}|{mode if by_mode else '*'}|{dt}|{H}|{Hk}|{d}|{entrywise}|{device}"
        return cache.get_or_compute(SpectraCache.digest(*arrays, tag=key), lambda: _frozen(compute))

    def heads(matrix_type, A_full, B_full, explicit):
        res = cached(matrix_type, (A_full, B_full),
                     lambda: _head_spectra(matrix_type, A_full, B_full, explicit, spec, mode, entrywise, device))
        _check_finite(res, lw.layer, matrix_type, dt)
        for h, (s, n21, n11) in enumerate(res):
            out.append(MatrixSpectrum(lw.layer, h, matrix_type, (N, N), s, n21, n11))
        if on_step:
            on_step(matrix_type)

    def dense(part):
        matrix_type = part_kind(part)
        W = lw.matrix(part)
        s, n21, n11 = cached(matrix_type, (W,), lambda: _dense_spectrum(W, device), by_mode=False)
        _check_finite([(s, n21, n11)], lw.layer, matrix_type, dt)
        out.append(MatrixSpectrum(lw.layer, -1, matrix_type, tuple(W.shape), s, n21, n11, part_expert(part)))
        if on_step:
            on_step(matrix_type)

    for part in lw.parts:
        if part_kind(part) != "attention":
            dense(part)
            continue
        if "QK" in attention:
            heads("QK", lw.Wq, lw.Wk, lw.QK)
        if "V" in attention:
            # Ṽ_h = W_{V,g(h)} W_{O,h}: A = value columns of the group (repeated per head), B = W_{O,h}ᵀ
            Wv_heads = np.concatenate([lw.W_V(h) for h in range(H)], axis=1) if Hk != H else lw.Wv
            heads("V", Wv_heads, lw.Wo.T, lw.V_tilde)
            del Wv_heads  # (GQA: an N×H·d_h copy) not held during the dense SVDs below
    return out


# --------------------------------------------------------------------------------------------
# One part of a layer, read from a checkpoint
# --------------------------------------------------------------------------------------------


def part_spectra(source: TensorSource, arch, layer: int, part, *, mode: str = "clean", dtype="float64",
                 entrywise: bool = True, device=None, lean: bool = False, chunk_bytes: int | None = None,
                 cache: SpectraCache | None = None) -> list:
    """The :class:`MatrixSpectrum` list of one part of layer ``layer`` of ``source`` (Chapter 6).

    The part's tensors alone are read (in ``dtype``) and decomposed by :func:`layer_spectra`. With
    ``lean`` (the dense factorization would not fit a worker's memory) a feed-forward matrix is read in
    its stored precision and factored by TSQR in ``dtype`` in blocks of at most ``chunk_bytes``
    (``_lean_dense``); the attention part computes its ``QK`` heads with only ``Wq``, ``Wk`` held, then
    its ``V`` heads with only ``Wv``, ``Wo`` (read again).
    """
    working = np.dtype(dtype)
    if lean and part_kind(part) != "attention":
        return _lean_dense(source, arch, layer, part, working, chunk_bytes, cache)
    if lean:
        out = []
        for group, drop in (("QK", ("Wv", "Wo")), ("V", ("Wq", "Wk"))):
            lw = _read_layer(source, arch, layer, working, (part,))
            lw = replace(lw, **dict.fromkeys(drop))
            out += layer_spectra(lw, mode, entrywise=entrywise, cache=cache, attention=(group,), device=device)
            del lw
        return out
    lw = _read_layer(source, arch, layer, working, (part,))
    return layer_spectra(lw, mode, entrywise=entrywise, cache=cache, device=device)


def _stored_dtype(source: TensorSource, names, working: np.dtype) -> np.dtype:
    """The narrowest dtype that holds the stored tensors ``names`` exactly and is no wider than ``working``
    (float16 for F16, float32 for BF16 and F32; ``working`` for anything else)."""
    kinds = {_EXACT.get(str(source.dtype(n)).replace("torch.", ""), working.name) for n in names}
    dt = max((np.dtype(k) for k in kinds), key=lambda d: d.itemsize)
    return dt if dt.itemsize <= working.itemsize else working


def _lean_dense(source: TensorSource, arch, layer: int, part, working: np.dtype, chunk_bytes: int | None = None,
                cache: SpectraCache | None = None) -> list:
    """The :class:`MatrixSpectrum` of a large ``M_in``/``M_out`` part, factored lean.

    ``W`` is read in its stored precision (float16 stays float16: a quarter of float64), and the tall
    orientation ``Z`` (``W`` or ``Wᵀ``, more rows than columns) is widened a block of rows at a time into a
    triangular-pentagonal QR (LAPACK ``tpqrt``) that updates one n×n factor ``R``: ``[R; Z_block] = Q R'``.
    The singular values of ``R`` are those of ``Z``, hence of ``W``; the norms are accumulated block by
    block on the same scaled entries as the dense path (the power of two of
    ``bounds_lib.theory.norms._pow2_scaled``). Peak: ``W`` as stored + ``R`` + one block, instead of ``W``
    widened + LAPACK's copy. The numbers agree with the dense SVD within
    ``bounds_lib.analysis.devices.spectra_agree`` (tested), not bit for bit. Blocks of at most
    ``chunk_bytes`` (default ``_CHUNK_BYTES``).
    """
    kind = part_kind(part)
    chunk_bytes = chunk_bytes or _CHUNK_BYTES
    names = list(part_tensor_names(arch, layer, part).values())
    lw = _read_layer(source, arch, layer, _stored_dtype(source, names, working), (part,))
    W = lw.matrix(part)
    del lw
    if cache is None:
        s, a, b = _tsqr_spectrum(W, working, chunk_bytes)
    else:
        key = SpectraCache.digest(W, tag=f"{kind}|tsqr|{working.name}|{chunk_bytes}")
        s, a, b = cache.get_or_compute(key, lambda: _tsqr_spectrum(W, working, chunk_bytes))
    _check_finite([(s, a, b)], layer, kind, working.name)
    return [MatrixSpectrum(layer, -1, kind, tuple(W.shape), s, a, b, part_expert(part))]


def _tsqr_spectrum(W: np.ndarray, working: np.dtype, chunk_bytes: int | None = None) -> tuple:
    """``(sigma, norm_21, norm_11)`` of ``W`` by blocked TSQR in ``working`` precision (see ``_lean_dense``);
    blocks of at most ``chunk_bytes`` (default ``_CHUNK_BYTES``; the caller's, so that every worker
    blocks alike and gives the same bits)."""
    from scipy.linalg import lapack

    limit_new_libraries()  # SciPy's own OpenBLAS, loaded by that import, gets the caller's thread limit

    m = max(float(W.max()), -float(W.min())) if W.size else 0.0
    e = 0 if (m == 0.0 or 2.0 ** -_SAFE_EXPONENT <= m <= 2.0 ** _SAFE_EXPONENT) else math.frexp(m)[1]
    tall = W.shape[0] >= W.shape[1]
    rows, n = W.shape if tall else W.shape[::-1]
    tpqrt, = lapack.get_lapack_funcs(("tpqrt",), dtype=working)
    R = np.zeros((n, n), dtype=working, order="F")
    step = max(1, (chunk_bytes or _CHUNK_BYTES) // (n * working.itemsize))
    colsq = np.zeros(n, dtype=working)  # tall (Z = W): the column norms of W accumulate over its row blocks
    n21 = n11 = 0.0
    for i in range(0, rows, step):
        # always a copy: tpqrt overwrites its block, and a one-row slice or a whole Wᵀ is Fortran-ordered already
        block = np.array(W[i:i + step] if tall else W[:, i:i + step].T, dtype=working, order="F", copy=True)
        if e:
            np.ldexp(block, -e, out=block)
        if tall:
            colsq += np.einsum("ij,ij->j", block, block)
        else:  # Z = Wᵀ: its rows are the columns of W
            n21 += float(np.sum(np.linalg.norm(block, axis=1)))
        n11 += float(np.sum(np.abs(block)))
        R, block, _, info = tpqrt(0, min(n, 64), R, block, overwrite_a=True, overwrite_b=True)
        if info != 0:  # pragma: no cover - LAPACK reports only argument errors here
            raise RuntimeError(f"LAPACK tpqrt failed (info={info})")
    if tall:
        n21 = float(np.sum(np.sqrt(colsq)))
    s, a, b = _unscale(svdvals(np.triu(R)), n21, n11, e)
    s.flags.writeable = False
    return s, a, b
