"""The analysis kernel: the lean (TSQR) path of one feed-forward part, head products, labels.

``part_spectra(..., lean=True)`` factors ``M_in`` / ``M_out`` by blocked TSQR in blocks of at most
``chunk_bytes`` — the caller's, so that every worker blocks alike and gives the same bits. These tests
pin that the caller's block size (or the module's default) reaches the factorization on both the cached
and the uncached call, and that weights whose norms leave the float64 range are refused with the layer,
the matrix and the working precision named.
"""
import numpy as np
import pytest

from bounds_lib.analysis import kernel as KERNEL
from bounds_lib.analysis.cache import SpectraCache
from bounds_lib.checkpoints import detect_architecture, open_checkpoint

from test_parallel import write_tiny


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("lean") / "bert", "bert", seed=3)


def _spy(monkeypatch):
    seen = []
    tsqr = KERNEL._tsqr_spectrum

    def spy(W, working, chunk_bytes=None):
        seen.append(chunk_bytes)
        return tsqr(W, working, chunk_bytes)

    monkeypatch.setattr(KERNEL, "_tsqr_spectrum", spy)
    return seen


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("part", ["M_in", "M_out"])
def test_the_callers_block_size_reaches_the_tsqr(bert_dir, monkeypatch, cached, part):
    """An explicit block size is passed on unchanged; none given means the module's ``_CHUNK_BYTES``."""
    seen = _spy(monkeypatch)
    source = open_checkpoint(bert_dir)
    arch = detect_architecture(source)
    for chunk, expected in ((4096, 4096), (None, KERNEL._CHUNK_BYTES)):
        cache = SpectraCache() if cached else None
        seen.clear()
        KERNEL.part_spectra(source, arch, 1, part, lean=True, chunk_bytes=chunk, cache=cache)
        assert seen == [expected]


def test_blocks_of_one_row_give_the_dense_spectrum(bert_dir):
    """The smallest block (one row of the tall side at a time) and the default agree with the dense SVD."""
    source = open_checkpoint(bert_dir)
    arch = detect_architecture(source)
    for part in ("M_in", "M_out"):
        dense, = KERNEL.part_spectra(source, arch, 0, part)
        n = min(dense.shape)
        for chunk in (n * 8, None):
            lean, = KERNEL.part_spectra(source, arch, 0, part, lean=True, chunk_bytes=chunk)
            assert (lean.layer, lean.head, lean.matrix_type, lean.shape) == (0, -1, part, dense.shape)
            np.testing.assert_allclose(lean.sigma, dense.sigma, rtol=1e-12, atol=1e-12 * dense.sigma[0])
            assert lean.norm_21 == pytest.approx(dense.norm_21, rel=1e-13)
            assert lean.norm_11 == pytest.approx(dense.norm_11, rel=1e-13)


def test_norms_beyond_float64_on_the_lean_path_name_layer_matrix_and_precision(tmp_path):
    """A float64 checkpoint whose M_in entries are 1e308 is finite as stored, but its (1,1) norm is not:
    the lean path refuses it with the dense path's message. (In float32 such weights are refused when
    read: beyond the float32 range.)"""
    from safetensors.numpy import load_file, save_file

    folder = write_tiny(tmp_path / "big", "bert", seed=1)
    tensors = {k: v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
    name = "encoder.layer.1.intermediate.dense.weight"
    tensors[name] = np.full_like(tensors[name], 1e308)
    save_file(tensors, folder / "model.safetensors")
    source = open_checkpoint(folder)
    arch = detect_architecture(source)
    msg = ("layer 1 M_in: singular values or norms exceed the float64 range (weights too large to analyse, "
           "computed in float64)")
    for cache in (None, SpectraCache()):
        with pytest.raises(ValueError) as err:
            KERNEL.part_spectra(source, arch, 1, "M_in", lean=True, dtype="float64", cache=cache)
        assert str(err.value) == msg


def _explicit(A, B, groups):
    """σ, (2,1) and (1,1) norms of every ``A_h B_{g(h)}ᵀ`` formed explicitly (the reference)."""
    out = []
    for h, g in enumerate(groups):
        P = A[h] @ B[g].T
        out.append((np.linalg.svd(P, compute_uv=False), np.linalg.norm(P, axis=0).sum(), np.abs(P).sum()))
    return out


@pytest.mark.parametrize("H, G, groups", [(2, 2, [1, 0]), (2, 3, [0, 1]), (3, 3, [2, 2, 0]), (4, 2, [0, 0, 1, 1])])
@pytest.mark.parametrize("N", [2, 5])
def test_head_products_follow_the_group_map_whatever_the_number_of_groups(H, G, groups, N):
    """Each head is paired with the group the map names — a permutation of as many groups as heads, the
    first heads of more groups than heads, repeated groups — never with "its own" index; N = H included
    (the number of rows of a block is not the number of heads)."""
    rng = np.random.default_rng(H * 10 + G + N)
    d = 2 if N > 2 else 1
    A, B = rng.standard_normal((H, N, d)), rng.standard_normal((G, N, d))
    sigma, n21, n11 = KERNEL.head_product_spectra(A, B, groups)
    assert sigma.shape == (H, d)
    for h, (s, a, b) in enumerate(_explicit(A, B, groups)):
        np.testing.assert_allclose(sigma[h], s[:d], rtol=1e-12)
        assert n21[h] == pytest.approx(a, rel=1e-12) and n11[h] == pytest.approx(b, rel=1e-12)
    _, _, none = KERNEL.head_product_spectra(A, B, groups, entrywise=False)
    assert np.isnan(none).all() and none.shape == (H,)


def test_labels_name_layer_matrix_head_and_expert():
    s = np.array([1.0])
    MS = KERNEL.MatrixSpectrum
    assert MS(3, 5, "QK", (4, 4), s, 1.0, 1.0).label() == "L3.QK.h5"
    assert MS(0, 0, "V", (4, 4), s, 1.0, 1.0).label() == "L0.V.h0"
    assert MS(3, -1, "M_in", (4, 2), s, 1.0, 1.0).label() == "L3.M_in"
    assert MS(3, -1, "M_out", (2, 4), s, 1.0, 1.0, 2).label() == "L3.M_out.e2"
    assert MS(1, -1, "M_in", (4, 2), s, 1.0, 1.0, 0).label() == "L1.M_in.e0"
