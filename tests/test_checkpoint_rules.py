"""The checkpoint rules added for issue 21, at the library level and with their exact messages: which
weight file a folder is read from, the layer-stack prefix, the activation, the weights-only refusal,
the download deadline and in-memory values. Fast (no transformers import); written against the
survivors of ``make mutation MODULES=checkpoints`` (tests/MUTATION.md)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_bad_inputs import CONFIG, tensors, write_model

from bounds_lib.checkpoints import formats, hub, layouts
from bounds_lib.checkpoints import CheckpointError, detect_architecture, open_checkpoint, weight_files


# ------------------------------------------------------------------ which file a folder is read from


def _with_config(d: Path, **extra) -> Path:
    f = d / "config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), **extra}))
    return d


@pytest.mark.parametrize("value, message", [
    (3, "transformers_weights = 3 is neither a *.safetensors file nor a *.safetensors.index.json shard index "
        "(as transformers requires)"),
    ("weights.bin", "transformers_weights = 'weights.bin' is neither a *.safetensors file nor a "
                    "*.safetensors.index.json shard index (as transformers requires)"),
    ("other.safetensors", "transformers_weights names 'other.safetensors', which is not a file of the model folder"),
    ("../m2/model.safetensors", "shard path '../m2/model.safetensors' leaves the model folder (only file names "
                                "inside the folder are allowed)"),
])
def test_transformers_weights_refusals(value, message, tmp_path):
    d = _with_config(write_model(tmp_path / "m"), transformers_weights=value)
    write_model(tmp_path / "m2")
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(d)
    assert str(err.value) == f"{d / 'config.json'}: {message}"


def test_transformers_weights_may_name_a_shard_index(tmp_path):
    d = write_model(tmp_path / "m")
    (d / "model.safetensors").rename(d / "part.safetensors")
    (d / "mine.safetensors.index.json").write_text(json.dumps({"weight_map": {k: "part.safetensors"
                                                                             for k in tensors()}}))
    _with_config(d, transformers_weights="mine.safetensors.index.json")
    assert weight_files(d) == [d / "mine.safetensors.index.json", d / "part.safetensors"]
    assert open_checkpoint(d).files == [d / "part.safetensors"]


def test_a_folder_without_the_standard_names_reads_its_safetensors_files(tmp_path):
    d = write_model(tmp_path / "m")
    t = tensors()
    half = len(t) // 2
    from safetensors.numpy import save_file

    names = list(t)
    save_file({k: t[k] for k in names[:half]}, str(d / "a.safetensors"))
    save_file({k: t[k] for k in names[half:]}, str(d / "b.safetensors"))
    (d / "model.safetensors").unlink()
    assert weight_files(d) == [d / "a.safetensors", d / "b.safetensors"]
    src = open_checkpoint(d)
    assert src.storage == "safetensors" and sorted(src.names()) == sorted(names)
    assert weight_files(write_model(tmp_path / "plain")) == [tmp_path / "plain" / "model.safetensors"]
    for f in (d / "a.safetensors", d / "b.safetensors"):
        f.unlink()
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(d)
    assert str(err.value) == (f"{d}: no weights found (expected model.safetensors, a sharded "
                              "model.safetensors.index.json, or pytorch_model.bin)")


# ------------------------------------------------------------------ the layer-stack prefix


def _stacks(*prefixes):
    t = {}
    for i, p in enumerate(prefixes):
        t.update({p + k: v for k, v in tensors(seed=i).items()})
    return open_checkpoint(t, config=CONFIG)


def test_stack_candidates_are_listed_shortest_first_then_by_name():
    src = _stacks("zz.", "aaaa.", "bb.")
    with pytest.raises(CheckpointError) as err:
        detect_architecture(src)
    assert str(err.value) == ("in-memory state dict: the weights hold 3 'bert' layer stacks, under the prefixes "
                              "'bb.', 'zz.', 'aaaa.'; which one to analyse is ambiguous — choose one with --prefix "
                              "(prefix= in Python)")
    assert detect_architecture(src, prefix="aaaa.").prefix == "aaaa."
    with pytest.raises(TypeError) as err:
        detect_architecture(src, prefix=1)
    assert str(err.value) == "prefix must be a tensor-name prefix (str), got int 1"


def test_no_stack_at_all_names_the_layout():
    src = open_checkpoint({"x.weight": np.ones((2, 2))}, config=CONFIG)
    with pytest.raises(CheckpointError) as err:
        detect_architecture(src)
    assert str(err.value) == ("in-memory state dict: no tensor named like 'encoder.layer.0.attention.self.query.weight'"
                              " — the weights do not match the 'bert' layout of config.json")


# ------------------------------------------------------------------ activations


def test_an_absent_activation_key_takes_transformers_default_and_a_bad_one_the_full_list():
    cfg = {k: v for k, v in CONFIG.items() if k != "hidden_act"}
    assert detect_architecture(open_checkpoint(tensors(), config=cfg)).activation == "gelu"  # BertConfig's default
    with pytest.raises(CheckpointError) as err:
        detect_architecture(open_checkpoint(tensors(), config={**CONFIG, "hidden_act": "swiglu"}))
    assert str(err.value) == ("in-memory state dict: config.json hidden_act = 'swiglu' is not a supported activation; "
                              "supported: " + ", ".join(sorted(layouts.ACTIVATION_L_PHI)))


def test_silu_constant_is_the_largest_slope():
    """``max_x d/dx (x σ(x))`` on a fine grid around its maximiser (an independent computation)."""
    x = np.linspace(2.0, 3.0, 2_000_001)
    s = 1 / (1 + np.exp(-x))
    slope = s * (1 + x * (1 - s))
    assert layouts._silu_lipschitz() == pytest.approx(float(slope.max()), abs=1e-12)
    L_phi = layouts.ACTIVATION_L_PHI
    assert L_phi["silu"] == L_phi["swish"] == L_phi["quick_gelu"] == layouts._silu_lipschitz()


# ------------------------------------------------------------------ the weights-only refusal, as a message


@pytest.mark.parametrize("text, want", [
    ("Weights only load failed. In PyTorch 2.6, we changed ...\nPlease file an issue with the following so that we "
     "can make `weights_only=True` compatible with your use case: WeightsUnpickler error: \n\nUnsupported operand "
     "149\n\nCheck the documentation of torch.load to learn more",
     "refused: not a weights-only PyTorch file (torch.load(weights_only=True): Unsupported operand 149); nothing "
     "from it was executed — convert the checkpoint to safetensors with code you trust"),
    ("Weights only load failed. This file can still be loaded, to do so you have two options, \x1b[1mdo those steps "
     "only if you trust the source of the checkpoint\x1b[0m. \n\t(1) ...\n\tWeightsUnpickler error: Unsupported "
     "global: GLOBAL print was not an allowed global by default. Please use `torch.serialization.add_safe_globals"
     "([print])` to allowlist this global.\n\nCheck the documentation",
     "refused: not a weights-only PyTorch file (torch.load(weights_only=True): Unsupported global: GLOBAL print was "
     "not an allowed global by default); nothing from it was executed — convert the checkpoint to safetensors with "
     "code you trust"),
    ("Weights only load failed. In PyTorch 2.6, ...\n\n\nTrying to load unsupported GLOBAL posix.system whose module "
     "posix is blocked.\n\nCheck the documentation",
     "refused: not a weights-only PyTorch file (torch.load(weights_only=True): Trying to load unsupported GLOBAL "
     "posix.system whose module posix is blocked); nothing from it was executed — convert the checkpoint to "
     "safetensors with code you trust"),
    ("Weights only load failed. Something new.",
     "refused: not a weights-only PyTorch file (torch.load(weights_only=True): it holds objects other than "
     "tensors); nothing from it was executed — convert the checkpoint to safetensors with code you trust"),
    ("\x1b[1minvalid load key, 'x'.\x1b[0m\nmore", "cannot read PyTorch weights (invalid load key, 'x'.)"),
    ("", "cannot read PyTorch weights (EOFError)"),
])
def test_weights_only_refusal_messages(text, want):
    exc = EOFError(text) if not text else RuntimeError(text)
    assert formats._torch_load_refusal(exc) == want


def test_a_pickle_bin_is_refused_in_process(tmp_path):
    import pickle

    pytest.importorskip("torch")
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG))
    (d / "pytorch_model.bin").write_bytes(pickle.dumps(tensors(), protocol=4))
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(d)
    assert str(err.value) == (f"{d / 'pytorch_model.bin'}: refused: not a weights-only PyTorch file "
                              "(torch.load(weights_only=True): Unsupported operand 149); nothing from it was "
                              "executed — convert the checkpoint to safetensors with code you trust")


# ------------------------------------------------------------------ the download deadline


def test_download_timeout_bounds_and_messages():
    top = hub.MAX_DOWNLOAD_TIMEOUT_S
    assert hub.check_download_timeout(top) == top and hub.check_download_timeout(1e-3) == 1e-3
    assert hub.check_download_timeout(0.5) == 0.5
    for bad in (0, -1, top * (1 + 1e-12)):
        with pytest.raises(ValueError) as err:
            hub.check_download_timeout(bad)
        assert str(err.value) == (f"download_timeout must be a positive number of seconds, at most {top:g} "
                                  f"(one week), got {bad!r}")
    with pytest.raises(TypeError, match=r"^download_timeout must be a real number"):
        hub.check_download_timeout("10")
    with pytest.raises(ValueError, match=r"^--t == inf, must be finite"):
        hub.check_download_timeout(math.inf, "--t")


# ------------------------------------------------------------------ in-memory values


def test_in_memory_shapes_and_dtypes_are_the_stored_ones():
    torch = pytest.importorskip("torch")
    src = open_checkpoint({"bf": torch.ones(3, 2, dtype=torch.bfloat16), "h": np.ones((2, 5), np.float16),
                           "l": [[1.0, 2.0, 3.0]]}, config=CONFIG)
    assert (src.shape("bf"), src.dtype("bf")) == ((3, 2), "bfloat16")
    assert (src.shape("h"), src.dtype("h")) == ((2, 5), "float16")
    assert (src.shape("l"), src.dtype("l")) == ((1, 3), "float64")


def test_two_stacks_are_already_ambiguous_and_a_wrong_prefix_lists_them():
    src = _stacks("student.", "teacher.")
    with pytest.raises(CheckpointError, match="the weights hold 2 'bert' layer stacks"):
        detect_architecture(src)
    with pytest.raises(CheckpointError) as err:
        detect_architecture(src, prefix="nobody.")
    assert str(err.value) == ("in-memory state dict: no layer stack under the prefix 'nobody.'; the weights hold one "
                              "under 'student.', 'teacher.'")


def test_the_source_class_follows_the_file_chosen(tmp_path):
    torch = pytest.importorskip("torch")
    assert open_checkpoint(write_model(tmp_path / "st")).storage == "safetensors"
    d = tmp_path / "bin"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG))
    torch.save({k: torch.from_numpy(v) for k, v in tensors().items()}, d / "pytorch_model.bin")
    assert open_checkpoint(d).storage == "pytorch-bin" and weight_files(d) == [d / "pytorch_model.bin"]
