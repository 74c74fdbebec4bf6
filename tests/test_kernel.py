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


# --------------------------------------------------------------------------------------------
# One layer and one part: defaults, forwarding, extreme weights in the paper mode
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gqa(tmp_path_factory):
    """``(source, arch, lw)``: a tiny grouped-query checkpoint (3 query heads, 1 key/value group) in float64."""
    from bounds_lib.checkpoints import iter_layers

    folder = write_tiny(tmp_path_factory.mktemp("gqa") / "llama", "llama", seed=5, N=12, H=3, Hkv=1, F=20, L=1)
    source = open_checkpoint(folder)
    arch = detect_architecture(source)
    lw, = iter_layers(source, arch, dtype=np.float64)
    return source, arch, lw


def _by_label(mats):
    return {m.label(): m for m in mats}


@pytest.mark.parametrize("field, matrix_type", [("Wq", "QK"), ("Wk", "QK"), ("Wv", "V"), ("Wo", "V")])
def test_paper_mode_with_one_side_beyond_the_safe_range_scales_back_exactly(gqa, field, matrix_type):
    """Paper mode factors the released products; when one projection lies beyond 2^±16 it is scaled by a
    power of two first, each head paired with its own key group (QK) or its own output rows (Ṽ), and the
    power is undone once: the spectra are the unscaled ones times 2^40 (both sides scaled: 2^80)."""
    from dataclasses import replace

    _, _, lw = gqa
    ref = _by_label(KERNEL.layer_spectra(lw, "paper"))
    for fields, k in (((field,), 40), (("Wq", "Wk") if matrix_type == "QK" else ("Wv", "Wo"), 80)):
        big = replace(lw, **{f: getattr(lw, f) * 2.0 ** 40 for f in fields})
        got = _by_label(KERNEL.layer_spectra(big, "paper"))
        for label, m in got.items():
            r = ref[label]
            scale = 2.0 ** k if m.matrix_type == matrix_type else 1.0
            np.testing.assert_allclose(m.sigma, r.sigma * scale, rtol=1e-12, atol=1e-12 * r.sigma[0] * scale)
            assert m.norm_21 == pytest.approx(r.norm_21 * scale, rel=1e-12)
            assert m.norm_11 == pytest.approx(r.norm_11 * scale, rel=1e-12)


@pytest.mark.parametrize("what", ["heads", "dense"])
def test_spectra_beyond_float64_are_refused_naming_layer_matrix_and_precision(gqa, what):
    """Products beyond float64 (QK with W_Q·2^1000, W_K·2^100; M_in's (1,1) norm with its entries
    ·2^1020) are one error naming the layer, the matrix and the precision, also when the (1,1) norms
    are not computed (their NaN does not hide an infinite σ)."""
    from dataclasses import replace

    _, _, lw = gqa
    if what == "heads":
        big, kind = replace(lw, Wq=lw.Wq * 2.0 ** 1000, Wk=lw.Wk * 2.0 ** 100), "QK"
    else:
        big, kind = replace(lw, M_in=lw.M_in * 2.0 ** 1020), "M_in"
    msg = (f"layer 0 {kind}: singular values or norms exceed the float64 range (weights too large to analyse, "
           "computed in float64)")
    for mode in KERNEL.MODES:
        for entrywise in (True, False):
            with pytest.raises(ValueError) as err:
                KERNEL.layer_spectra(big, mode, entrywise=entrywise)
            assert str(err.value) == msg


def test_layer_defaults_steps_and_mode_check(gqa):
    """By default the (1,1) norms are computed; ``on_step`` hears each group's name once, in order; an
    unknown mode is refused naming the modes."""
    _, _, lw = gqa
    steps = []
    mats = KERNEL.layer_spectra(lw, on_step=steps.append)
    assert steps == ["QK", "V", "M_in", "M_out"]
    assert all(np.isfinite(m.norm_11) for m in mats)
    assert all(np.isnan(m.norm_11) for m in KERNEL.layer_spectra(lw, entrywise=False) if m.head >= 0)
    with pytest.raises(ValueError) as err:
        KERNEL.layer_spectra(lw, "exact")
    assert str(err.value) == f"mode must be one of {KERNEL.MODES}, got 'exact'"


def test_a_part_defaults_to_the_dense_path_with_its_one_one_norms(gqa, monkeypatch):
    source, arch, _ = gqa
    seen = _spy(monkeypatch)
    for part in ("attention", "M_in", "M_out"):
        mats = KERNEL.part_spectra(source, arch, 0, part)
        assert all(np.isfinite(m.norm_11) for m in mats)
    assert seen == []


def test_the_lean_attention_forwards_mode_norms_cache_and_device_and_holds_one_group(gqa, monkeypatch):
    """Factored lean, the attention part gives the dense part's numbers bit for bit in both modes, with
    and without the (1,1) norms; each half holds only its own projections; a cache serves a second call
    and the device reaches every SVD."""
    source, arch, _ = gqa
    held, calls = [], []
    layer, heads = KERNEL.layer_spectra, KERNEL._head_spectra

    def spy_layer(lw, *a, **k):
        held.append((k.get("attention"), *(getattr(lw, f) is None for f in ("Wq", "Wk", "Wv", "Wo"))))
        return layer(lw, *a, **k)

    def spy_heads(*a):
        calls.append(a[0])
        return heads(*a)

    monkeypatch.setattr(KERNEL, "layer_spectra", spy_layer)
    monkeypatch.setattr(KERNEL, "_head_spectra", spy_heads)
    for mode in KERNEL.MODES:
        for entrywise in (True, False):
            dense = KERNEL.part_spectra(source, arch, 0, "attention", mode=mode, entrywise=entrywise)
            held.clear()
            lean = KERNEL.part_spectra(source, arch, 0, "attention", mode=mode, entrywise=entrywise, lean=True)
            assert held == [(("QK",), False, False, True, True), (("V",), True, True, False, False)]
            assert [m.label() for m in lean] == [m.label() for m in dense]
            for a, b in zip(lean, dense):
                np.testing.assert_array_equal(a.sigma, b.sigma)
                # the (1,1) norms of the heads exactly when asked, in both modes
                assert (a.norm_21, np.isnan(a.norm_11)) == (b.norm_21, not entrywise)
                assert np.isnan(a.norm_11) or a.norm_11 == b.norm_11
    cache = SpectraCache()
    KERNEL.part_spectra(source, arch, 0, "attention", lean=True, cache=cache)
    calls.clear()
    KERNEL.part_spectra(source, arch, 0, "attention", lean=True, cache=cache)
    assert calls == []


@pytest.mark.parametrize("lean", [False, True])
def test_the_device_reaches_every_dense_svd(gqa, monkeypatch, lean):
    """``device="torch-cpu"`` reaches the paper mode's per-head SVDs and the feed-forward SVD (the dense
    path; the lean path factors M_in/M_out by TSQR on the CPU, its small factor included)."""
    pytest.importorskip("torch")
    from bounds_lib.analysis import devices

    source, arch, _ = gqa
    seen = []
    svd = KERNEL.svdvals

    def spy(W, device=None):
        seen.append(device)
        return svd(W, device)

    monkeypatch.setattr(KERNEL, "svdvals", spy)
    torch_cpu = devices.resolve_device("torch-cpu")
    for part in ("attention", "M_in", "M_out"):
        seen.clear()
        KERNEL.part_spectra(source, arch, 0, part, mode="paper", device="torch-cpu", lean=lean)
        if part == "attention" or not lean:
            assert seen == [torch_cpu] * (3 * 2 if part == "attention" else 1)
        else:  # the TSQR's small triangular factor, on the CPU
            assert seen == [None]


def test_a_spectrum_is_float64_and_read_only_whatever_it_was_made_from():
    """σ given as a list of integers, a float32 array or a writeable float64 array is held as a read-only
    float64 view: a spectrum shared by a cache cannot be changed through any holder."""
    for given in ([3, 1], np.array([3.0, 1.0], dtype=np.float32), np.array([3.0, 1.0])):
        m = KERNEL.MatrixSpectrum(0, -1, "M_in", (2, 2), given, 4.0, 4.0)
        assert m.sigma.dtype == np.float64 and m.sigma.tolist() == [3.0, 1.0]
        assert not m.sigma.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            m.sigma[0] = 0.0


def test_a_wide_matrix_is_decomposed_tall(gqa, monkeypatch):
    """The dense SVD gets the tall one of ``W`` and ``Wᵀ`` (LAPACK's wide path, an LQ first, is slower on
    OpenBLAS), and the singular values are ``W``'s: the fixture's ``M_in`` is N×2d_ff (12×40, wide), its
    ``M_out`` d_ff×N (20×12, tall)."""
    source, arch, lw = gqa
    assert lw.M_in.shape == (12, 40) and lw.M_out.shape == (20, 12)
    shapes = []
    svd = KERNEL.svdvals

    def spy(W, device=None):
        shapes.append(W.shape)
        return svd(W, device)

    monkeypatch.setattr(KERNEL, "svdvals", spy)
    for part, tall in (("M_in", (40, 12)), ("M_out", (20, 12))):
        shapes.clear()
        (m,) = KERNEL.part_spectra(source, arch, 0, part)
        assert shapes == [tall], (part, shapes)
        # W's own singular values, to the rounding of two LAPACK paths (measured: 2e-16 of σ₁ here)
        np.testing.assert_allclose(m.sigma, np.linalg.svd(lw.matrix(part), compute_uv=False),
                                   rtol=0, atol=1e-14 * m.sigma[0])
