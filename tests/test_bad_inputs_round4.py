"""Bad input, round four (issue 30, item 4): the newer families with malformed shapes, NaN/Inf in each
family, configs whose ``model_type`` lies, shard indexes naming files outside the folder, symlink loops,
and tampered results files given to ``python -m bounds_lib.studies.reproduce``. The pool and Dask cases of the
same round are in tests/test_stopping.py.

Same contract as tests/test_bad_inputs.py (its helpers are reused): a refused case exits 1 with one
``bounds-lib: error:`` line naming the problem and leaves no output, no traceback; an accepted case gives
the number of the model the config describes, checked against transformers' own forward pass
(tests/test_architectures.py's probe) or against the clean checkpoint.

=================================================  ========================  ==============================  ==========
input                                              expectation               outcome before                  now
=================================================  ========================  ==============================  ==========
**Malformed shapes** (SHAPES)
Phi-3 qkv_proj 31 rows (32 = (4+2·2)·4)            error, shape + rule       error (regression)              same
Phi-3 num_attention_heads 8 (qkv 24 rows)          error, shape + rule       error (regression)              same
Phi-3 gate_up_proj odd rows                        error, [gate | up] rule   error (regression)              same
GPT-NeoX num_attention_heads 0 / "4" / absent      error, positive integer   error (regression)              same
GPT-NeoX query_key_value transposed                error, expected shape     error (regression)              same
GPT-NeoX num_attention_heads 8 or 2 (divide 16)    the 8/2-head model's      exit 0, its numbers (verified)  same
Mixtral expert 2 of layer 1 missing / 0,1,3        error, names the tensor   error (regression)              same
Mixtral num_local_experts 4 (3 stored)             error, names experts.3    error (regression)              same
GQA num_key_value_heads 3 or 8 of 4 heads          error, do not divide      error (regression)              same
GQA num_key_value_heads 1 / null (2 stored)        error, expected shape     error (regression)              same
ViT without hidden_size / heads / ffn / layers     error, names the key      error (regression)              same
ViT without model_type                             error, lists supported    error (regression)              same
ViT without hidden_act                             transformers' gelu        exit 0 (test_architectures)     same
**NaN / Inf** (NONFINITE)
NaN, -Inf in an analysed weight, 11 families       error naming the tensor   error (regression)              same
NaN in Mixtral's router, an embedding, a norm,     the clean model's number  exit 0, clean numbers           same
  a bias (tensors the analysis never reads)        (not refused: see below)
**model_type lies** (LIES, RIGHT_NUMBER)
GPT-2 tensors as llama / gpt_neox                  error: layout mismatch    "config.json has no             fixed
                                                                             'num_hidden_layers'" (misled)
LLaMA↔BERT, BERT→GPT-2, Phi-3↔LLaMA, NeoX↔GPT-2,   error: layout mismatch    error (regression)              same
  Mixtral↔Mistral, ViT↔BERT, NeoX↔Phi-3
OPT tensors as llama                               error naming the key      "no 'intermediate_size'"        same
LLaMA↔Mistral, Qwen2→LLaMA, Gemma→LLaMA            the described model's     exit 0, verified against        same
                                                                             transformers' forward
**Shard index outside the folder** (OUTSIDE)
../outside, sub/../../outside, ..\\outside,          error: leaves the folder  error (regression; ../ in        same
  absolute; .bin index; transformers_weights                                 round one)
shard "model\\0.safetensors"                        error: NUL                "embedded null byte" (no where) fixed
shard "."                                          error: the folder itself  "shard m ... is missing"        fixed
shard "~/outside"                                  error: missing, as named  "shard outside.safetensors      fixed
                                                                             ... is missing"
shard that is a folder / a link to /dev/zero       error: not a regular file "is missing"                    fixed
shard a symlink to a file outside (Hub cache)      accepted, same number     accepted                        same
**Symlink loops** (LOOPS)
model.safetensors → itself; a loop of two          error: loops              "[Errno 40] Too many levels     fixed
                                                                             of symbolic links: ..."
indexed shard → itself; a loop of two              error: loops              "is missing"                    fixed
model.safetensors.index.json → itself              error: loops              exit 0 (shards read unindexed)  fixed
config.json → itself                               error: loops              "no config.json"                fixed
pytorch_model.bin → itself                         error: loops              "no weights found"              fixed
model folder → itself; a loop of two               error: loops              "no such model directory"       fixed
model.safetensors → a missing file                 error: names the target   bare "[Errno 2] No such file"   fixed
stray looping *.safetensors next to the model      accepted, same number     accepted                        same
**Tampered results file → reproduce** (TAMPERED)
row lacks a field / config / proxies; NaN; "1.0"   one line, exit 1          ResultsError traceback          fixed
proxy true (a bool as a measurement)               one line, exit 1          accepted, would train           fixed
config L "2", unknown key, a list                  one line, exit 1, before  TypeError traceback after       fixed
                                                   any training              loading
config changed (check)                             one line, exit 1          ValueError traceback            fixed
200k-deep JSON; not UTF-8                          one line, exit 1          RecursionError / Unicode-       fixed
                                                                             DecodeError traceback
duplicate key ("rows" twice)                       one line, exit 1          last one kept ("no rows" tb)    fixed
file > 256 MiB (sparse)                            one line, exit 1, unread  read whole into memory          fixed
a proxy changed by 1 %                             NOT REPRODUCED, exit 1    (same, after training)          same
**Pool / Dask** — tests/test_stopping.py
pool under memory pressure (cgroup limit)          pool sized by the limit   see test_stopping.py            there
worker SIGKILLed mid-unit                          one clear error           see test_stopping.py            there
--scheduler: silent TCP server / garbage           error within timeout      see test_stopping.py            there
=================================================  ========================  ==============================  ==========

Left as is, on purpose: NaN in a tensor the analysis never reads (router, embeddings, norms, biases) is not
refused — the reported numbers are exactly the clean checkpoint's (asserted below); a dangling or looping
link among the weight-file names is now refused even where transformers would skip it silently.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_bad_inputs import Q0, assert_one_clear_line, run_cli, sharded_model, tensors, write_model

import bounds_lib.studies.reproduce as P
import bounds_lib.studies.results as R
from bounds_lib.checkpoints import CheckpointError, detect_architecture, open_checkpoint
from bounds_lib.cli import main
from bounds_lib.analysis.scoring import analyze

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file, save_file  # noqa: E402
from test_architectures import RTOL, cross_check  # noqa: E402
from tiny_checkpoints import write_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``name -> folder`` of each tiny model of tests/tiny_checkpoints.py, written once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = write_tiny_model(tmp_path_factory.mktemp(name), name)[0]
        return cache[name]

    return get


def _copy(saved, name, d, tensors=None, **config):
    """A copy of tiny ``name`` in ``d``; ``tensors(dict) -> dict`` edits the weights, ``config`` the config
    (a value ``...`` removes the key)."""
    shutil.copytree(saved(name), d)
    if tensors is not None:
        f = d / "model.safetensors"
        save_file(tensors(load_file(f)), f)
    f = d / "config.json"
    cfg = json.loads(f.read_text())
    cfg.update(config)
    f.write_text(json.dumps({k: v for k, v in cfg.items() if v is not ...}))
    return d


def _drop(*prefixes):
    return lambda t: {k: v for k, v in t.items() if not k.startswith(prefixes)}


def _set(name, value, index):
    def edit(t):
        a = t[name].copy()
        a[index] = value
        return {**t, name: a}
    return edit


def _cli_refuses(capsys, tmp_path, model, fragment):
    rc, cap, out = run_cli(capsys, tmp_path, model, "--jobs", "1")
    assert rc == 1
    assert_one_clear_line(rc, cap, out, fragment)


def _cli_log10_edelman(capsys, tmp_path, model) -> float:
    out = tmp_path / "ok.json"
    tmp_path.mkdir(parents=True, exist_ok=True)
    capsys.readouterr()
    rc = main(["analyze", str(model), "--json", str(out), "--no-progress", "--jobs", "1", "--quiet"])
    assert rc == 0 and "Traceback" not in capsys.readouterr().err
    return json.loads(out.read_text())["summary"]["B_edelman"]["log10"]


# ------------------------------------------------------------------ 1. malformed shapes, newer families

QKV = "model.layers.0.self_attn.qkv_proj.weight"
NEOX_QKV = "gpt_neox.layers.0.attention.query_key_value.weight"
MOE = "model.layers.{l}.block_sparse_moe.experts.{e}."
# case -> (family, tensor edit, config edit, fragment of the one error line)
SHAPES = {
    "phi3 qkv 31 rows": ("phi3", lambda t: {**t, QKV: t[QKV][:-1]}, {},
                         "has shape (31, 16), expected (32, 16) from config.json (rows [q | k | v] = (4 + 2·2"),
    "phi3 8 heads": ("phi3", None, {"num_attention_heads": 8},
                     "has shape (32, 16), expected (24, 16) from config.json (rows [q | k | v] = (8 + 2·2"),
    "phi3 gate_up odd": ("phi3", lambda t: {**t, "model.layers.0.mlp.gate_up_proj.weight":
                                            t["model.layers.0.mlp.gate_up_proj.weight"][:-1]}, {},
                         "expected (48, 16) from config.json (rows [gate | up] = 2 × intermediate_size 24)"),
    "neox heads 0": ("gpt_neox", None, {"num_attention_heads": 0}, "number of heads must be a positive integer, got 0"),
    "neox heads '4'": ("gpt_neox", None, {"num_attention_heads": "4"},
                       "number of heads must be a positive integer, got '4'"),
    "neox heads absent": ("gpt_neox", None, {"num_attention_heads": ...}, "has no 'num_attention_heads'"),
    "neox qkv transposed": ("gpt_neox", lambda t: {**t, NEOX_QKV: np.ascontiguousarray(t[NEOX_QKV].T)}, {},
                            f"tensor {NEOX_QKV!r} has shape (16, 48), expected (48, 16)"),
    "mixtral expert missing": ("mixtral", _drop(MOE.format(l=1, e=2)), {},
                               "layer 1 has no 'block_sparse_moe.experts.2.w1.weight' tensor"),
    "mixtral experts 0, 1, 3": ("mixtral", lambda t: {k.replace(".experts.2.", ".experts.3."): v for k, v in t.items()},
                                {}, "layer 0 has no 'block_sparse_moe.experts.2.w1.weight' tensor"),
    "mixtral 4 experts declared": ("mixtral", None, {"num_local_experts": 4},
                                   "layer 0 has no 'block_sparse_moe.experts.3.w1.weight' tensor"),
    "llama kv 3 of 4": ("llama", None, {"num_key_value_heads": 3}, "3 key/value heads do not divide 4 query heads"),
    "llama kv 8 of 4": ("llama", None, {"num_key_value_heads": 8}, "8 key/value heads do not divide 4 query heads"),
    "mistral kv 3 of 4": ("mistral", None, {"num_key_value_heads": 3}, "3 key/value heads do not divide 4"),
    "llama kv 1 (2 stored)": ("llama", None, {"num_key_value_heads": 1},
                              "has shape (8, 16), expected (4, 16) from config.json (4 query heads, 1 key/value"),
    "llama kv null (2 stored)": ("llama", None, {"num_key_value_heads": None},
                                 "has shape (8, 16), expected (16, 16) from config.json (4 query heads, 4 key/value"),
    **{f"vit without {key}": ("vit", None, {key: ...}, f"has no {key!r} ({what})")
       for key, what in (("hidden_size", "hidden size"), ("num_attention_heads", "number of heads"),
                         ("intermediate_size", "feed-forward width"), ("num_hidden_layers", "number of layers"))},
    "vit without model_type": ("vit", None, {"model_type": ...}, "config.json has no 'model_type'; supported: bert"),
}


@pytest.mark.parametrize("case", list(SHAPES))
def test_malformed_shapes_of_the_newer_families(case, saved, tmp_path, capsys):
    name, edit, config, fragment = SHAPES[case]
    model = _copy(saved, name, tmp_path / "m", edit, **config)
    _cli_refuses(capsys, tmp_path, model, fragment)
    with pytest.raises(CheckpointError, match=None) as err:
        detect_architecture(open_checkpoint(model))
    assert fragment in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("heads", [8, 2])
def test_neox_with_another_head_count_that_divides_is_that_model(heads, saved, tmp_path, capsys):
    """48 rows are 8 heads × 3 × 2 as well as 4 × 3 × 4: no shape can tell. transformers builds the model
    the config describes; bounds-lib must analyse that very model (its own forward agrees) — and the
    numbers differ from the 4-head reading (the head count is used, not ignored)."""
    model = _copy(saved, "gpt_neox", tmp_path / "m", num_attention_heads=heads)
    tm = transformers.GPTNeoXForCausalLM.from_pretrained(model)
    for layer, errs in cross_check("gpt_neox", model, tm).items():
        assert max(errs) < RTOL, (layer, errs)
    got = _cli_log10_edelman(capsys, tmp_path, model)
    assert got == pytest.approx(analyze(model).log_B_edelman / math.log(10), rel=1e-14)
    assert analyze(model).arch.n_heads == heads
    assert abs(got - analyze(saved("gpt_neox")).log_B_edelman / math.log(10)) > 1e-3


# ------------------------------------------------------------------ 2. NaN and Inf in each family

NONFINITE = {"gpt2": "transformer.h.1.attn.c_attn.weight", "llama": "model.layers.0.self_attn.k_proj.weight",
             "mistral": "model.layers.0.self_attn.v_proj.weight", "qwen2": "model.layers.1.mlp.up_proj.weight",
             "gemma": "model.layers.0.self_attn.o_proj.weight", "phi3": "model.layers.1.self_attn.qkv_proj.weight",
             "gpt_neox": NEOX_QKV, "opt": "model.decoder.layers.1.fc1.weight",
             "mixtral": MOE.format(l=1, e=2) + "w2.weight",
             "vit": "vit.encoder.layer.0.attention.attention.value.weight"}


@pytest.mark.parametrize("value", [np.nan, -np.inf, np.inf], ids=["nan", "-inf", "inf"])
@pytest.mark.parametrize("name", list(NONFINITE))
def test_a_non_finite_weight_is_refused_naming_the_tensor(name, value, saved, tmp_path, capsys):
    tensor = NONFINITE[name]
    model = _copy(saved, name, tmp_path / "m", _set(tensor, value, (1, -1)))
    _cli_refuses(capsys, tmp_path, model, f"tensor {tensor!r} contains 1 NaN or infinite entries")


def test_a_non_finite_bert_weight_is_refused_naming_the_tensor(tmp_path, capsys):
    t = tensors()
    t["encoder.layer.1.output.dense.weight"][2, 3] = np.nan
    _cli_refuses(capsys, tmp_path, write_model(tmp_path / "m", t),
                 "tensor 'encoder.layer.1.output.dense.weight' contains 1 NaN or infinite entries")


UNREAD = {"mixtral router": ("mixtral", "model.layers.0.block_sparse_moe.gate.weight", (0, 0)),
          "llama embedding": ("llama", "model.embed_tokens.weight", (3, 1)),
          "llama norm": ("llama", "model.layers.0.input_layernorm.weight", (0,)),
          "gpt2 bias": ("gpt2", "transformer.h.0.attn.c_attn.bias", (0,))}


@pytest.mark.parametrize("case", list(UNREAD))
def test_nan_in_a_tensor_the_analysis_never_reads_leaves_the_numbers_exact(case, saved, tmp_path, capsys):
    name, tensor, index = UNREAD[case]
    model = _copy(saved, name, tmp_path / "m", _set(tensor, np.nan, index))
    got = _cli_log10_edelman(capsys, tmp_path, model)
    assert got == _cli_log10_edelman(capsys, tmp_path / "clean", saved(name))


# ------------------------------------------------------------------ 3. a config whose model_type lies

LIES = {("gpt2", "llama"): "no tensor named like 'layers.0.self_attn.q_proj.weight' — the weights do not match "
                           "the 'llama' layout",
        ("gpt2", "gpt_neox"): "no tensor named like 'layers.0.attention.query_key_value.weight' — the weights do "
                              "not match the 'gpt_neox' layout",
        ("llama", "bert"): "the weights do not match the 'bert' layout",
        ("llama", "gpt2"): "the weights do not match the 'gpt2' layout",
        ("phi3", "llama"): "the weights do not match the 'llama' layout",
        ("llama", "phi3"): "no tensor named like 'layers.0.self_attn.qkv_proj.weight'",
        ("gpt_neox", "gpt2"): "the weights do not match the 'gpt2' layout",
        ("gpt_neox", "phi3"): "the weights do not match the 'phi3' layout",
        ("phi3", "gpt_neox"): "the weights do not match the 'gpt_neox' layout",
        ("mixtral", "mistral"): "layer 0 has no 'mlp.gate_proj.weight' tensor",
        ("mistral", "mixtral"): "layer 0 has no 'block_sparse_moe.experts.0.w1.weight' tensor",
        ("vit", "bert"): "the weights do not match the 'bert' layout",
        ("opt", "llama"): "config.json has no 'intermediate_size' (feed-forward width)"}


@pytest.mark.parametrize("real, lie", list(LIES), ids=[f"{a} as {b}" for a, b in LIES])
def test_a_lying_model_type_is_refused_when_the_layout_differs(real, lie, saved, tmp_path, capsys):
    _cli_refuses(capsys, tmp_path, _copy(saved, real, tmp_path / "m", model_type=lie), LIES[real, lie])


def test_a_lying_model_type_of_bert_weights(tmp_path, capsys):
    for lie in ("llama", "gpt2", "vit"):
        _cli_refuses(capsys, tmp_path / lie, write_model(tmp_path / lie / "m", model_type=lie),
                     f"the weights do not match the {lie!r} layout")


RIGHT_NUMBER = {("llama", "mistral"): "MistralForCausalLM", ("mistral", "llama"): "LlamaForCausalLM",
                ("qwen2", "llama"): "LlamaForCausalLM", ("gemma", "llama"): "LlamaForCausalLM"}


@pytest.mark.parametrize("real, lie", list(RIGHT_NUMBER), ids=[f"{a} as {b}" for a, b in RIGHT_NUMBER])
def test_a_model_type_with_the_same_layout_is_the_model_it_describes(real, lie, saved, tmp_path, capsys):
    """Same tensor names: transformers builds the ``lie`` model from these weights, and bounds-lib's
    matrices are those of that model's own forward."""
    model = _copy(saved, real, tmp_path / "m", model_type=lie)
    tm = getattr(transformers, RIGHT_NUMBER[real, lie]).from_pretrained(model)
    for layer, errs in cross_check(lie, model, tm).items():
        assert max(errs) < RTOL, (layer, errs)
    got = _cli_log10_edelman(capsys, tmp_path, model)
    assert got == pytest.approx(analyze(model).log_B_edelman / math.log(10), rel=1e-14)


# ------------------------------------------------------------------ 4. shard indexes naming files outside

W_OUT = "model-00001-of-00002.safetensors"


def _moved_out(d: Path, name: str, index="model.safetensors.index.json") -> Path:
    """A sharded model whose first shard, a real file, is moved to ``name`` (outside, if it says so)."""
    sharded_model(d)
    target = Path(name) if os.path.isabs(name) else d / name.replace("\\", "/")
    target.parent.mkdir(parents=True, exist_ok=True)
    (d / W_OUT).rename(target)
    f = d / index
    doc = json.loads(f.read_text())
    doc["weight_map"] = {k: name if v == W_OUT else v for k, v in doc["weight_map"].items()}
    f.write_text(json.dumps(doc))
    return d


def _named(d: Path, name: str, make=None) -> Path:
    sharded_model(d, weight_map=lambda wm: {**wm, Q0: name})
    if make:
        make(d)
    return d


def _bin_index_outside(d: Path) -> Path:
    t = {k: torch.from_numpy(v) for k, v in tensors().items()}
    d.mkdir(parents=True)
    torch.save({k: v for k, v in t.items() if ".0." in k}, d.parent / "outside.bin")
    torch.save({k: v for k, v in t.items() if ".1." in k}, d / "pytorch_model-00002-of-00002.bin")
    wm = {k: "../outside.bin" if ".0." in k else "pytorch_model-00002-of-00002.bin" for k in t}
    (d / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wm}))
    write_model(d.parent / "cfg")
    shutil.copy(d.parent / "cfg" / "config.json", d)
    return d


def _weights_named_outside(d: Path, name: str) -> Path:
    write_model(d, transformers_weights=name)
    shutil.copy(d / "model.safetensors", d.parent / "outside.safetensors")
    return d


OUTSIDE = {
    "../outside (a real file)": (lambda d: _moved_out(d, "../outside.safetensors"),
                                 "shard path '../outside.safetensors' leaves the model folder"),
    "sub/../../outside": (lambda d: _moved_out(d, "sub/../../outside.safetensors"),
                          "shard path 'sub/../../outside.safetensors' leaves the model folder"),
    "..\\outside": (lambda d: _moved_out(d, "..\\outside.safetensors"), "leaves the model folder"),
    "absolute path (a real file)": (lambda d: _moved_out(d, str(d.parent / "outside.safetensors")),
                                    "outside.safetensors' leaves the model folder"),
    ".bin index naming ../outside.bin": (_bin_index_outside, "shard path '../outside.bin' leaves the model folder"),
    "transformers_weights ../outside": (lambda d: _weights_named_outside(d, "../outside.safetensors"),
                                        "config.json: shard path '../outside.safetensors' leaves the model folder"),
    "shard with a NUL": (lambda d: _named(d, "model\0.safetensors"), "contains a NUL character"),
    "shard '.'": (lambda d: _named(d, "."), "shard path '.' names the model folder itself, not a file in it"),
    "shard '~/outside'": (lambda d: _named(d, "~/outside.safetensors"),
                          "shard ~/outside.safetensors listed in the index is missing"),
    "shard is a folder": (lambda d: _named(d, "sub", lambda d: (d / "sub").mkdir()),
                          "shard sub listed in the index is not a regular file"),
    "shard links to /dev/zero": (lambda d: _named(d, "z.safetensors",
                                                  lambda d: (d / "z.safetensors").symlink_to("/dev/zero")),
                                 "shard z.safetensors listed in the index is not a regular file"),
}


def _loop(name, *, via=None, make=write_model, target=None):
    """``make(d)``, then ``d/name`` replaced by a link to itself (or to ``via``, which links back; or to
    ``target``, which does not exist)."""
    def prepare(d):
        make(d)
        (d / name).unlink()
        (d / name).symlink_to(target or via or name)
        if via:
            (d / via).symlink_to(name)
        return d
    return prepare


def _folder_loop(d):
    d.symlink_to(d.name)
    return d


def _folder_loop2(d):
    d.symlink_to("other")
    (d.parent / "other").symlink_to(d.name)
    return d


LOOP = "is a symbolic link that loops back on itself"
SHARD2 = "model-00002-of-00002.safetensors"
LOOPS = {
    "model.safetensors -> itself": (_loop("model.safetensors"), f"model.safetensors: the weight file {LOOP}"),
    "model.safetensors -> b -> model.safetensors": (_loop("model.safetensors", via="b.safetensors"),
                                                    f"model.safetensors: the weight file {LOOP}"),
    "indexed shard -> itself": (_loop(SHARD2, make=sharded_model), f"shard {SHARD2} listed in the index {LOOP}"),
    "indexed shard -> x -> shard": (_loop(SHARD2, via="x.safetensors", make=sharded_model),
                                    f"shard {SHARD2} listed in the index {LOOP}"),
    "index -> itself": (_loop("model.safetensors.index.json", make=sharded_model),
                        f"model.safetensors.index.json: the weight file {LOOP}"),
    "config.json -> itself": (_loop("config.json"), f"config.json: config.json {LOOP}"),
    "model.safetensors -> pytorch_model.bin -> back": (_loop("model.safetensors", via="pytorch_model.bin"),
                                    f"model.safetensors: the weight file {LOOP}"),
    "model.safetensors -> a missing file": (_loop("model.safetensors", via=None, target="gone.safetensors"),
                                            "model.safetensors: the weight file is a symbolic link to "
                                            "'gone.safetensors', which does not exist"),
    "model folder -> itself": (_folder_loop, f"the model folder {LOOP}"),
    "model folder -> other -> folder": (_folder_loop2, f"the model folder {LOOP}"),
}


@pytest.mark.parametrize("case", list(OUTSIDE) + list(LOOPS))
def test_shard_paths_outside_the_folder_and_symlink_loops(case, tmp_path, capsys):
    prepare, fragment = {**OUTSIDE, **LOOPS}[case]
    model = prepare(tmp_path / "m")
    _cli_refuses(capsys, tmp_path, model, fragment)
    with pytest.raises(CheckpointError) as err:
        detect_architecture(open_checkpoint(model))
    assert fragment in str(err.value)


def test_a_lone_looping_pytorch_bin_is_named(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").symlink_to("pytorch_model.bin")
    _cli_refuses(capsys, tmp_path, d, f"pytorch_model.bin: the weight file {LOOP}")


def test_links_that_resolve_and_stray_loops_are_read_as_the_model(tmp_path, capsys):
    """A shard linked to a file outside (as the Hub cache's ../../blobs links) and a stray looping
    ``*.safetensors`` next to ``model.safetensors`` (never read) give the clean model's number."""
    clean = _cli_log10_edelman(capsys, tmp_path / "a", write_model(tmp_path / "clean"))
    linked = _moved_out(tmp_path / "linked", "../outside.safetensors")
    (linked / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    f = linked / "model.safetensors.index.json"
    f.write_text(f.read_text().replace("../outside.safetensors", "link.safetensors"))
    assert _cli_log10_edelman(capsys, tmp_path / "b", linked) == clean
    stray = write_model(tmp_path / "stray")
    (stray / "zz.safetensors").symlink_to("zz.safetensors")
    assert _cli_log10_edelman(capsys, tmp_path / "c", stray) == clean


# ------------------------------------------------------------------ 5. a tampered results file → reproduce

GRID = R.load_results("trained_grid")


def _row0(d, key, value):
    d["rows"][0][key] = value


def _proxy0(d, value):
    d["rows"][0]["proxies"]["B_edelman"] = value


def _config0(d, key, value):
    d["rows"][0]["config"][key] = value


# case -> (edit(doc) of trained_grid.json, or the file's text, argv, fragment of the one error line)
TAMPERED = {
    "row lacks test_error": (lambda d: d["rows"][0].pop("test_error"), ["regenerate", "--rows", "trained_grid:0"],
                             "row 0 lacks test_error"),
    "row lacks config": (lambda d: d["rows"][0].pop("config"), ["check"], "row 0 lacks config"),
    "proxies a list": (lambda d: _row0(d, "proxies", [1.0]), ["check"], "row 0 lacks the proxies B_ours_sum"),
    "proxy NaN": (lambda d: _proxy0(d, math.nan), ["check"], "row 0 holds a non-finite or non-numeric measurement"),
    "proxy a string": (lambda d: _proxy0(d, "1.0"), ["check"], "row 0 holds a non-finite or non-numeric"),
    "proxy a bool": (lambda d: _proxy0(d, True), ["check"], "row 0 holds a non-finite or non-numeric"),
    "n_rows a string": (lambda d: d["metadata"].__setitem__("n_rows", "80"), ["check"],
                        "metadata says n_rows = '80' but the file holds 80 rows"),
    "config L a string": (lambda d: _config0(d, "L", "2"), ["regenerate", "--rows", "trained_grid:0"],
                          "results 'trained_grid' row 0: its configuration cannot be trained (L (number of blocks) "
                          "must be an integer, got str '2')"),
    "config unknown key": (lambda d: _config0(d, "bogus", 1), ["regenerate", "--rows", "trained_grid:0"],
                           "its configuration cannot be trained (TrainConfig.__init__() got an unexpected keyword"),
    "config a list": (lambda d: _row0(d, "config", [2]), ["regenerate", "--rows", "trained_grid:0"],
                      "results 'trained_grid' row 0: 'config' must be an object, got list"),
    "config changed (check)": (lambda d: _config0(d, "lr", 0.02), ["check"],
                               "results 'trained_grid' row 0 is not the row the tolerance was measured on"),
    "200k-deep JSON": ("[" * 200_000 + "]" * 200_000, ["check"], "nested too deeply to be a results file"),
    "not UTF-8": (b"\xff\xfe{}", ["check"], "corrupted results file, not UTF-8 text"),
    "not JSON": ("{oops", ["check"], "corrupted results file, not valid JSON"),
    "'rows' twice": (json.dumps(GRID)[:-1] + ', "rows": []}', ["check"], "an object names 'rows' twice"),
}


def _tampered_file(tmp_path, edit) -> Path:
    f = tmp_path / "trained_grid.json"
    if isinstance(edit, bytes):
        f.write_bytes(edit)
    elif isinstance(edit, str):
        f.write_text(edit)
    else:
        doc = json.loads(json.dumps(GRID))
        edit(doc)
        f.write_text(json.dumps(doc))
    return f


@pytest.fixture
def never_train(monkeypatch):
    def regenerate(row, threads=1):
        raise AssertionError("a tampered file must be refused before any training")
    monkeypatch.setattr(P, "regenerate", regenerate)


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_results_file_is_one_line_before_any_training(case, tmp_path, monkeypatch, capsys, never_train):
    edit, argv, fragment = TAMPERED[case]
    monkeypatch.setitem(R.RESULTS_FILES, "trained_grid", str(_tampered_file(tmp_path, edit)))
    capsys.readouterr()
    rc = P.main(argv)
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 1 and cap.out == "" and len(lines) == 1, cap.err
    assert lines[0].startswith("python -m bounds_lib.studies.reproduce: error: ") and fragment in lines[0], lines[0]


def test_a_huge_results_file_is_refused_unread(tmp_path, monkeypatch, capsys, never_train):
    f = tmp_path / "trained_grid.json"
    with open(f, "wb") as fh:  # sparse: no disk, but reading it would take 256 MiB of memory and more
        fh.truncate(R.MAX_RESULTS_BYTES + 1)
    monkeypatch.setitem(R.RESULTS_FILES, "trained_grid", str(f))
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read"))
    assert P.main(["check"]) == 1
    assert f"{R.MAX_RESULTS_BYTES + 1} bytes, more than a results file holds" in capsys.readouterr().err


def test_a_changed_committed_number_is_not_reproduced(tmp_path, monkeypatch, capsys):
    """A proxy moved by 1 % passes the file's checks; regenerating (here: the true committed rows, as a
    perfect regeneration) then reports it NOT REPRODUCED, exit 1."""
    truth = {json.dumps(r["config"], sort_keys=True): r for name in ("trained_grid", "common_loss", "study", "robust")
             for r in R.load_results(name)["rows"]}
    f = _tampered_file(tmp_path, lambda d: _proxy0(d, d["rows"][0]["proxies"]["B_edelman"] * 1.01))
    monkeypatch.setitem(R.RESULTS_FILES, "trained_grid", str(f))
    monkeypatch.setattr(P, "regenerate", lambda row, threads=1: json.loads(json.dumps(
        truth[json.dumps(row["config"], sort_keys=True)])))
    assert P.main(["check"]) == 1
    out = capsys.readouterr().out.splitlines()
    bad = [ln for ln in out if "NOT REPRODUCED" in ln]
    assert len(bad) == 1 and bad[0].startswith("trained_grid[0]: NOT REPRODUCED") and "proxies.B_edelman" in bad[0]


def test_the_reproduce_process_prints_one_line_and_no_traceback(tmp_path):
    f = _tampered_file(tmp_path, "[" * 200_000 + "]" * 200_000)
    code = ("import sys, bounds_lib.studies.results as R; R.RESULTS_FILES['trained_grid'] = sys.argv[1]; "
            "from bounds_lib.studies.reproduce import main; sys.exit(main(sys.argv[2:]))")
    p = subprocess.run([sys.executable, "-c", code, str(f), "regenerate", "--rows", "trained_grid:0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == [f"python -m bounds_lib.studies.reproduce: error: {f}: corrupted "
                                                 "results file, "
                                             "nested too deeply to be a results file"]
