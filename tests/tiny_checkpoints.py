"""The one writer of tiny checkpoints for the tests: BERT (the ``tiny_bert_dir`` fixture) and every other
layout :mod:`bounds_lib.checkpoints` reads (:func:`write_tiny_model`).

Two ways to fill a BERT folder, both BERT-layout safetensors with a ``config.json``:

* a real, randomly initialised ``transformers.BertModel`` saved with ``save_pretrained`` (the
  default; seeded, optional ``init_std``, torch ``dtype`` and ``max_shard_size``), or
* hand-made ``weights`` (a ``{name: numpy array}`` dict, e.g. :func:`bert_encoder_weights` edited
  by a test), written with ``safetensors.numpy`` next to a minimal BERT config — no transformers
  import, so bad-input tables stay fast; ``shard_by_layer=True`` writes one shard per layer plus
  the ``model.safetensors.index.json`` the Hub writes.

``config`` entries passed as keyword arguments are merged into ``config.json`` after writing (a
test of a bad config writes a valid checkpoint, then a wrong value).

:func:`write_tiny_model` does the same for the other architectures (:data:`TINY_MODELS`: LLaMA, GPT-2,
Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Phi-3, GPT-NeoX, OPT, Mixtral, ViT): transformers' own config and
model classes, random initialisation under a seed, ``save_pretrained`` — so the tensor names, shapes and
fused layouts are those transformers writes, not ours.
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
    from bounds_lib.analysis.kernel import MatrixSpectrum
    from bounds_lib.analysis.spectra import ModelSpectra

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


#: Tiny configurations of transformers' own classes, one per architecture the cross-checks cover:
#: ``name -> (config class, model class, config keywords)``. Sizes are chosen so that every layout
#: rule is exercised: grouped-query attention (4 query heads on 2 key/value heads) wherever the family
#: has it, a ``head_dim`` that is not ``hidden / heads`` (Gemma), OPT's ``word_embed_proj_dim``
#: projections outside the blocks, three Mixtral experts, a ViT with a classification head (the
#: ``vit.`` prefix).
TINY_MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=16, n_layer=2, n_head=4, n_positions=16)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",  # q/k/v biases (left out by the analysis)
              dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2)),
    # per-head RMSNorms of queries and keys (q_norm, k_norm) between the projections and the logits
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=4)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM",
              dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8)),
    # query_pre_attn_scalar = head_dim: Gemma 2's logit scale is then 1/√d_h like everyone's
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4)),
    "opt": ("OPTConfig", "OPTForCausalLM",
            dict(hidden_size=16, ffn_dim=24, num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=8)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, num_local_experts=3, num_experts_per_tok=2)),
    "vit": ("ViTConfig", "ViTForImageClassification",
            dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4, image_size=8,
                 patch_size=4, num_labels=2)),
}


def tiny_model(name: str, *, seed: int = 0, init_std: float = 0.2, **config):
    """A randomly initialised transformers model of :data:`TINY_MODELS` (eval mode, float32).

    Every floating-point parameter is redrawn ``N(0, init_std²)`` under ``torch.manual_seed(seed)``
    (transformers' initialisation leaves biases and norm weights at 0 or 1 and its weights at std
    0.02; a layout error is plainer on weights of order one). ``**config`` overrides the sizes.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    cfg_name, model_name, sizes = TINY_MODELS[name]
    text = {} if name == "vit" else dict(vocab_size=30, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                         **({} if name == "gpt2" else {"max_position_embeddings": 16}))
    cfg = getattr(transformers, cfg_name)(**{**text, **sizes, **config})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, model_name)(cfg)
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point():
                    p.normal_(0.0, init_std)
    return model.eval()


def write_tiny_model(path: Path, name: str, *, seed: int = 0, init_std: float = 0.2, dtype: str = "float32",
                     max_shard_size: str | None = None, **config):
    """Write :func:`tiny_model` ``name`` into ``path`` with ``save_pretrained`` (safetensors); return
    ``(path, model)`` — the model as saved (torch ``dtype``), for cross-checks against its own forward."""
    torch = pytest.importorskip("torch")

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model = tiny_model(name, seed=seed, init_std=init_std, **config).to(getattr(torch, dtype))
    model.save_pretrained(path, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    return path, model
