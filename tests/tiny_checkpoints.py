"""The one writer of tiny BERT checkpoints for the tests (exposed as the ``tiny_bert_dir`` fixture).

Two ways to fill the folder, both BERT-layout safetensors with a ``config.json``:

* a real, randomly initialised ``transformers.BertModel`` saved with ``save_pretrained`` (the
  default; seeded, optional ``init_std``, torch ``dtype`` and ``max_shard_size``), or
* hand-made ``weights`` (a ``{name: numpy array}`` dict, e.g. :func:`bert_encoder_weights` edited
  by a test), written with ``safetensors.numpy`` next to a minimal BERT config — no transformers
  import, so bad-input tables stay fast; ``shard_by_layer=True`` writes one shard per layer plus
  the ``model.safetensors.index.json`` the Hub writes.

``config`` entries passed as keyword arguments are merged into ``config.json`` after writing (a
test of a bad config writes a valid checkpoint, then a wrong value).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

#: Encoder matrices of one BERT layer: (name, shape as a function of hidden size N and FFN width F).
BERT_LAYER_ROLES = (("attention.self.query.weight", "NN"), ("attention.self.key.weight", "NN"),
                    ("attention.self.value.weight", "NN"), ("attention.output.dense.weight", "NN"),
                    ("intermediate.dense.weight", "FN"), ("output.dense.weight", "NF"))


def bert_encoder_weights(*, hidden: int, intermediate: int, layers: int, seed: int = 0, scale: float = 0.3,
                         dtype=np.float32) -> dict[str, np.ndarray]:
    """Gaussian ``encoder.layer.{l}.*`` weights (std ``scale``) for every layer, in reading order."""
    size = {"N": hidden, "F": intermediate}
    rng = np.random.default_rng(seed)
    return {f"encoder.layer.{l}.{name}": (rng.standard_normal((size[shape[0]], size[shape[1]])) * scale).astype(dtype)
            for l in range(layers) for name, shape in BERT_LAYER_ROLES}


def write_tiny_bert(path: Path, *, hidden: int = 32, layers: int = 2, heads: int = 4, intermediate: int = 64,
                    init_std: float = 0.02, seed: int = 0, dtype: str = "float32", max_shard_size: str | None = None,
                    weights: dict | None = None, shard_by_layer: bool = False, **config) -> Path:
    """Write a tiny BERT checkpoint into ``path`` (created) and return ``path``.

    Without ``weights``: ``transformers.BertModel`` (vocabulary 30, 16 positions) initialised under
    ``torch.manual_seed(seed)`` with ``initializer_range=init_std``, cast to torch ``dtype``, saved with
    ``save_pretrained(max_shard_size=...)``. With ``weights``: those arrays as they are (any dtype) and a
    minimal config (``model_type``, sizes, ``hidden_act``); ``shard_by_layer`` splits them into one
    file per layer with an index. ``**config`` is merged into ``config.json`` last.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if weights is None:
        if shard_by_layer:
            raise TypeError("shard_by_layer applies to hand-made weights; use max_shard_size for a BertModel")
        torch = pytest.importorskip("torch")
        transformers = pytest.importorskip("transformers")

        cfg = transformers.BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                      intermediate_size=intermediate, vocab_size=30, max_position_embeddings=16,
                                      initializer_range=init_std)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = transformers.BertModel(cfg)
        model = model.to(getattr(torch, dtype))
        model.save_pretrained(path, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    else:
        from safetensors.numpy import save_file

        if shard_by_layer:
            shards = [{k: v for k, v in weights.items() if f".{l}." in k} for l in range(layers)]
            names = [f"model-{i + 1:05d}-of-{layers:05d}.safetensors" for i in range(layers)]
            for shard, name in zip(shards, names):
                save_file(shard, str(path / name))
            weight_map = {k: name for shard, name in zip(shards, names) for k in shard}
            (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        else:
            save_file(weights, str(path / "model.safetensors"))
        (path / "config.json").write_text(json.dumps(
            {"model_type": "bert", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
             "intermediate_size": intermediate, "hidden_act": "gelu"}))
    if config:
        cfg_file = path / "config.json"
        cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), **config}))
    return path


def read_state_dict(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the (unsharded) checkpoint in ``path``, widened to float64 — an independent reader."""
    from safetensors.numpy import load_file

    return {k: v.astype(np.float64) for k, v in load_file(str(Path(path) / "model.safetensors")).items()}


def synthetic_spectra(L: int = 3, H: int = 2, N: int = 8, d: int = 4, sigma1: float = 10.0, decay: float = 0.5):
    """A BERT-shaped ``ModelSpectra`` with known spectra, no checkpoint: per layer ``H`` QK and V heads of rank ``d``
    (singular values ``sigma1·decay^i``), and FFN matrices with ``N`` values from ``sigma1`` down to ``sigma1/10``."""
    from bounds_lib.checkpoints import ArchitectureSpec
    from bounds_lib.spectra import MatrixSpectrum, ModelSpectra

    arch = ArchitectureSpec("bert", "bert", L, N, H, H, d, 4 * N, "gelu", "")
    mats = []
    for l in range(L):
        for matrix_type in ("QK", "V"):
            for h in range(H):
                s = np.zeros(N)
                s[:d] = sigma1 * decay ** np.arange(d)
                mats.append(MatrixSpectrum(l, h, matrix_type, (N, N), s, 3.0 * sigma1, 9.0 * sigma1))
        for matrix_type, shape in (("M_in", (N, 4 * N)), ("M_out", (4 * N, N))):
            s = np.full(N, sigma1) * np.linspace(1, 0.1, N)
            mats.append(MatrixSpectrum(l, -1, matrix_type, shape, s, 5.0 * sigma1, 20.0 * sigma1))
    return ModelSpectra(arch, "clean", "float64", tuple(mats), "synthetic")
