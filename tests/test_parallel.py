"""Work units smaller than a layer (issue 23): a layer's parts are read and decomposed one at a time.

A part (``"attention"``, ``"M_in"``, ``"M_out"``; :func:`bounds_lib.checkpoints.layer_parts`) reads
only its own tensors, and its spectra are exactly (bitwise, in one process) those the whole-layer
path gives, in the order of the parts.
"""
import json

import numpy as np
import pytest

from bounds_lib.checkpoints import (
    LAYER_PARTS,
    detect_architecture,
    iter_layers,
    layer_parts,
    open_checkpoint,
    part_tensor_names,
)
from bounds_lib.spectra import layer_spectra


def _tiny_weights(family, rng, N=12, H=3, Hkv=1, F=20, L=2):
    """``(tensors, config)`` of a tiny checkpoint of ``family`` (stored layouts as transformers saves them)."""
    d = N // H
    t = {}
    for i in range(L):
        if family == "bert":
            p = f"encoder.layer.{i}."
            shapes = {"attention.self.query.weight": (N, N), "attention.self.key.weight": (N, N),
                      "attention.self.value.weight": (N, N), "attention.output.dense.weight": (N, N),
                      "intermediate.dense.weight": (F, N), "output.dense.weight": (N, F)}
        elif family == "gpt2":
            p = f"h.{i}."
            shapes = {"attn.c_attn.weight": (N, 3 * N), "attn.c_proj.weight": (N, N),
                      "mlp.c_fc.weight": (N, F), "mlp.c_proj.weight": (F, N)}
        else:
            p = f"model.layers.{i}."
            shapes = {"self_attn.q_proj.weight": (H * d, N), "self_attn.k_proj.weight": (Hkv * d, N),
                      "self_attn.v_proj.weight": (Hkv * d, N), "self_attn.o_proj.weight": (N, H * d),
                      "mlp.gate_proj.weight": (F, N), "mlp.up_proj.weight": (F, N),
                      "mlp.down_proj.weight": (N, F)}
        t.update({p + k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()})
    config = {"bert": {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
                       "intermediate_size": F, "hidden_act": "gelu"},
              "gpt2": {"model_type": "gpt2", "n_layer": L, "n_embd": N, "n_head": H, "n_inner": F},
              "llama": {"model_type": "llama", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
                        "num_key_value_heads": Hkv, "intermediate_size": F, "hidden_act": "silu"}}[family]
    return t, config


def write_tiny(folder, family, seed=0, **sizes):
    """A tiny safetensors checkpoint of ``family`` in ``folder``; returns ``folder``."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors, config = _tiny_weights(family, np.random.default_rng(seed), **sizes)
    save_file(tensors, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


FAMILIES = ("bert", "gpt2", "llama")


def _same(a, b):
    """Two lists of MatrixSpectrum equal bit for bit (fields, shapes, every singular value and norm)."""
    assert [m.label() for m in a] == [m.label() for m in b]
    for x, y in zip(a, b):
        assert (x.layer, x.head, x.matrix_type, x.shape) == (y.layer, y.head, y.matrix_type, y.shape)
        np.testing.assert_array_equal(x.sigma, y.sigma)
        assert x.norm_21 == y.norm_21
        assert x.norm_11 == y.norm_11 or (np.isnan(x.norm_11) and np.isnan(y.norm_11))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_parts_give_the_whole_layers_numbers_in_order(tmp_path, family, mode):
    src = open_checkpoint(write_tiny(tmp_path / family, family))
    spec = detect_architecture(src)
    for layer in range(spec.n_layers):
        assert layer_parts(spec, layer) == LAYER_PARTS
        whole = layer_spectra(next(iter_layers(src, spec, layers=[layer])), mode)
        by_part = []
        for part in layer_parts(spec, layer):
            lw = next(iter_layers(src, spec, layers=[layer], parts=(part,)))
            assert lw.parts == (part,)
            by_part += layer_spectra(lw, mode)
        _same(whole, by_part)
        assert [m.matrix_type for m in whole] == ["QK"] * spec.n_heads + ["V"] * spec.n_heads + ["M_in", "M_out"]


def test_the_identity_check_sees_a_changed_weight(tmp_path):
    """Power: one entry changed in one part's tensor makes the comparison above fail."""
    src = open_checkpoint(write_tiny(tmp_path / "a", "llama"))
    spec = detect_architecture(src)
    whole = layer_spectra(next(iter_layers(src, spec, layers=[0])))
    name = part_tensor_names(spec, 0, "M_out")["down"]
    raw = src.read(name, np.float32).copy()
    raw[0, 0] += 1e-3
    tensors, config = _tiny_weights("llama", np.random.default_rng(0))
    tensors[name] = raw
    other = open_checkpoint(tensors, config=config)
    parts = [m for p in LAYER_PARTS for m in layer_spectra(next(iter_layers(other, spec, layers=[0], parts=(p,))))]
    with pytest.raises(AssertionError):
        _same(whole, parts)


class _Spy:
    """Wraps a source's ``read``: records every tensor name read."""

    def __init__(self, src):
        self.names = []
        inner = src.read

        def read(name, dtype=np.float64):
            self.names.append(name)
            return inner(name, dtype)

        src.read = read


@pytest.mark.parametrize("family", FAMILIES)
def test_a_part_reads_only_its_tensors(tmp_path, family):
    src = open_checkpoint(write_tiny(tmp_path / family, family))
    spec = detect_architecture(src)
    spy = _Spy(src)
    everything = []
    for part in LAYER_PARTS:
        spy.names.clear()
        lw = next(iter_layers(src, spec, layers=[1], parts=(part,)))
        expected = list(part_tensor_names(spec, 1, part).values())
        assert spy.names == expected  # each once, nothing else
        assert lw.names == part_tensor_names(spec, 1, part)
        everything += expected
        for other in set(LAYER_PARTS) - {part}:
            with pytest.raises(ValueError, match="not"):
                lw.matrix(other) if other != "attention" else lw.QK(0)
    assert sorted(everything) == sorted(spec.tensor_names(1).values())  # the parts cover the layer
    spy.names.clear()
    next(iter_layers(src, spec, layers=[1]))  # power: the whole layer reads every tensor, once
    assert sorted(spy.names) == sorted(spec.tensor_names(1).values())


def test_bad_parts_are_refused(tmp_path):
    src = open_checkpoint(write_tiny(tmp_path / "b", "bert"))
    spec = detect_architecture(src)
    for bad in [(), ("mlp",), ("M_in", "ffn")]:
        with pytest.raises(ValueError, match="parts must be"):
            next(iter_layers(src, spec, parts=bad))
    with pytest.raises(ValueError, match="out of range"):
        layer_parts(spec, spec.n_layers)
    lw = next(iter_layers(src, spec, parts=("M_out", "attention")))  # any order: read in the layer's order
    assert lw.parts == ("attention", "M_out") and lw.M_in is None
