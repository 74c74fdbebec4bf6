"""Reading real Transformer checkpoints and extracting the paper's matrices (Chapter 6).

The paper's Section 6 (and the authors' released scripts) measures four kinds of
matrices in every layer ``ℓ`` of a trained model, in the row-vector convention ``X ↦ XW``:

* ``QK_{ℓ,h} = W_{Q,h} W_{K,h}ᵀ`` (N×N, rank ≤ d_h) — head ``h``'s attention logits are
  ``X QK_{ℓ,h} Xᵀ`` (biases, rotary embeddings and the ``1/√d_h`` scale left out, as released);
* ``Ṽ_{ℓ,h} = W_{V,h} W_{O,h}`` (N×N, rank ≤ d_h) — head ``h``'s contribution ``X Ṽ_{ℓ,h}`` to the
  attention output;
* ``M_in`` (N×d_ff) and ``M_out`` (d_ff×N) — the feed-forward maps around the activation.

Sources (:func:`open_checkpoint`): a local model directory (``config.json`` plus a single or sharded
safetensors file, or legacy PyTorch ``.bin`` files as a fallback), a Hugging Face Hub id resolved
through the local cache (downloading only when the user allows it and is online), or an in-memory
``torch.nn.Module`` / state dict. Tensors are read one at a time (the safetensors reader below seeks
to each tensor; nothing is mapped or loaded wholesale), half precision (f16, bf16) is widened exactly,
and everything is computed in float64 unless float32 is requested.

Layouts (:data:`SUPPORTED_MODEL_TYPES`):

* **BERT family** (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA: ``encoder.layer.i.attention.self.query``…;
  DistilBERT: ``transformer.layer.i.attention.q_lin``…). ``nn.Linear`` stores ``(out, in)``, so
  ``W_Q = query.weightᵀ``.
* **GPT-2** (``h.i.attn.c_attn``): ``Conv1D`` stores ``(in, out)`` already; the fused ``c_attn`` has
  columns ``[Q | K | V]``.
* **LLaMA / Mistral / Qwen2 / Qwen3** (``layers.i.self_attn.q_proj``…, ``mlp.gate_proj/up_proj/down_proj``).
  Grouped-query attention: query head ``h`` reads key/value group ``h // (H / H_kv)``, exactly as
  Hugging Face's ``repeat_kv``. Gated feed-forward ``down(φ(x G) ⊙ x U)``: we take
  ``M_in = [G | U]`` (N×2d_ff, the one linear map feeding the gated unit) and ``M_out = down``
  (d_ff×N). The gate's product is not globally Lipschitz, so for these models the propagation
  factor is a proxy on the same footing as the released BERT one, not a bound.
"""
from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

__all__ = [
    "CheckpointError",
    "SUPPORTED_MODEL_TYPES",
    "ALLOW_DOWNLOAD_ENV",
    "TensorSource",
    "SafetensorsSource",
    "TorchBinSource",
    "StateDictSource",
    "ArchitectureSpec",
    "LayerWeights",
    "open_checkpoint",
    "resolve_hub_id",
    "detect_architecture",
    "iter_layers",
    "read_safetensors_header",
]

#: Environment switch that allows downloads of Hub ids missing from the local cache.
ALLOW_DOWNLOAD_ENV = "BOUNDS_LIB_ALLOW_DOWNLOAD"


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not match a supported layout (one-line message)."""


# --------------------------------------------------------------------------------------------
# Tensor sources
# --------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"), "U16": np.dtype("<u2"), "U32": np.dtype("<u4"),
    "U64": np.dtype("<u8"), "F8_E4M3": np.dtype("u1"), "F8_E5M2": np.dtype("u1"),
}
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
_MAX_HEADER = 100 * 2**20


def _widen(raw: np.ndarray, st_dtype: str) -> np.ndarray:
    """Widen a raw little-endian buffer to a native float array exactly (bf16 → f32 by a 16-bit shift)."""
    if st_dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(raw.dtype.newbyteorder("="), copy=False)


def read_safetensors_header(path) -> tuple[int, dict]:
    """Parse and validate a safetensors header; return ``(data_start, {name: entry})``.

    Raises :class:`CheckpointError` for a file too short to hold a header, a header length beyond the
    file, a header that is not JSON, an entry without dtype/shape/offsets, or tensor data that runs past
    the end of the file (a truncated download).
    """
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        raise CheckpointError(f"{path}: {size} bytes is too short for a safetensors file (truncated?)")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n == 0 or n > size - 8 or n > _MAX_HEADER:
            raise CheckpointError(
                f"{path}: safetensors header length {n} does not fit a file of {size} bytes "
                "(garbage header or truncated file)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: safetensors header is not valid JSON (garbage header)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: safetensors header is not a JSON object (garbage header)")
    header.pop("__metadata__", None)
    data_len = size - 8 - n
    entries = {}
    for name, e in header.items():
        try:
            dtype, shape, (b, end) = e["dtype"], tuple(int(s) for s in e["shape"]), e["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: header entry for {name!r} lacks dtype/shape/data_offsets") from None
        if dtype not in _ST_DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        need = int(np.prod(shape, dtype=np.int64)) * _ST_DTYPES[dtype].itemsize
        if not (0 <= b <= end) or end - b != need:
            raise CheckpointError(f"{path}: tensor {name!r} has inconsistent data offsets {b}..{end} "
                                  f"for shape {shape} {dtype}")
        if end > data_len:
            raise CheckpointError(f"{path}: tensor {name!r} ends at byte {end} but the file holds only "
                                  f"{data_len} data bytes (truncated file)")
        entries[name] = {"dtype": dtype, "shape": shape, "offsets": (int(b), int(end))}
    return 8 + n, entries


class TensorSource:
    """A set of named tensors plus the model's ``config`` dict, read one tensor at a time."""

    description: str = ""
    config: dict
    kind: str = ""

    def names(self) -> list[str]:  # pragma: no cover - interface
        raise NotImplementedError

    def shape(self, name: str) -> tuple:  # pragma: no cover - interface
        raise NotImplementedError

    def dtype(self, name: str) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def read_raw(self, name: str) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def read(self, name: str, dtype=np.float64) -> np.ndarray:
        """Tensor ``name`` widened exactly to ``dtype``; NaN or infinite entries raise."""
        if name not in self._name_set():
            raise CheckpointError(f"{self.description}: no tensor named {name!r}")
        raw = np.asarray(self.read_raw(name))
        with np.errstate(over="ignore", invalid="ignore"):  # overflows are detected just below
            A = raw.astype(dtype, copy=False)
            probe = A if A.dtype.itemsize < raw.dtype.itemsize else raw  # narrowing may overflow to inf
            # NaN/inf propagate into a float64 sum, so a finite sum proves every entry finite (one cheap
            # pass); only a non-finite sum (huge weights, or a bad entry) needs the full check
            finite = np.isfinite(np.sum(probe, dtype=np.float64)) or np.all(np.isfinite(probe))
        if not finite:
            bad = int(probe.size - np.count_nonzero(np.isfinite(probe)))
            raise CheckpointError(f"{self.description}: tensor {name!r} contains {bad} NaN or infinite "
                                  "entries; the weights are corrupt")
        return A

    def _name_set(self):
        if not hasattr(self, "_names_cache"):
            self._names_cache = frozenset(self.names())
        return self._names_cache

    def __contains__(self, name) -> bool:
        return name in self._name_set()

    def _init_files(self, files, config: dict, description: str):
        """Common start of the file-backed sources: the files, the config, a description."""
        self.files = [Path(f) for f in files]
        self.config = config
        self.description = description or str(self.files[0].parent)


class SafetensorsSource(TensorSource):
    """One or several (sharded, ``model.safetensors.index.json``) safetensors files."""

    kind = "safetensors"

    def __init__(self, files, config: dict, description: str = ""):
        self._init_files(files, config, description)
        self._where = {}
        for f in self.files:
            start, entries = read_safetensors_header(f)
            for name, e in entries.items():
                self._where[name] = (f, start, e)

    def names(self):
        return list(self._where)

    def shape(self, name):
        return self._where[name][2]["shape"]

    def dtype(self, name):
        return self._where[name][2]["dtype"]

    def read_raw(self, name):
        f, start, e = self._where[name]
        b, end = e["offsets"]
        if e["dtype"] not in _FLOAT_DTYPES:
            raise CheckpointError(f"{f}: tensor {name!r} has non-float dtype {e['dtype']}")
        with open(f, "rb") as fh:
            fh.seek(start + b)
            buf = fh.read(end - b)
        if len(buf) != end - b:
            raise CheckpointError(f"{f}: could not read tensor {name!r} (file truncated while reading)")
        raw = np.frombuffer(buf, dtype=_ST_DTYPES[e["dtype"]]).reshape(e["shape"])
        return _widen(raw, e["dtype"])


def _torch_to_numpy(t) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)  # exact widening
    if not t.is_floating_point():
        raise CheckpointError(f"tensor has non-float dtype {t.dtype}")
    return t.numpy()


class _MappingSource(TensorSource):
    """A source whose tensors sit in a dict ``self._tensors`` (torch tensors or NumPy arrays)."""

    def names(self):
        return list(self._tensors)

    def shape(self, name):
        return tuple(self._tensors[name].shape)

    def dtype(self, name):
        return str(self._tensors[name].dtype).replace("torch.", "")

    def read_raw(self, name):
        t = self._tensors[name]
        if isinstance(t, np.ndarray):
            return t
        return _torch_to_numpy(t)


class TorchBinSource(_MappingSource):
    """Legacy PyTorch ``pytorch_model.bin`` files (loaded with ``weights_only=True``, memory-mapped)."""

    kind = "pytorch-bin"

    def __init__(self, files, config: dict, description: str = ""):
        import torch

        self._init_files(files, config, description)
        self._tensors = {}
        for f in self.files:
            try:
                sd = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
            except Exception as exc:
                try:  # old (non-zip) serialisation cannot be memory-mapped
                    sd = torch.load(f, map_location="cpu", weights_only=True)
                except Exception:
                    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise CheckpointError(f"{f}: cannot read PyTorch weights ({msg})") from None
            if not isinstance(sd, Mapping):
                raise CheckpointError(f"{f}: does not contain a state dict")
            self._tensors.update(sd)


class StateDictSource(_MappingSource):
    """An in-memory state dict (torch tensors or NumPy arrays) with its config."""

    kind = "in-memory"

    def __init__(self, state_dict: Mapping, config: dict, description: str = "in-memory state dict"):
        self._tensors = dict(state_dict)
        self.config = dict(config)
        self.description = description


# --------------------------------------------------------------------------------------------
# Opening a model: directory, Hub id, module, state dict
# --------------------------------------------------------------------------------------------

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?")


def _load_config(directory: Path) -> dict:
    cfg = directory / "config.json"
    if not cfg.is_file():
        raise CheckpointError(f"{directory}: no config.json (a model directory needs config.json next to "
                              "its weights)")
    try:
        config = json.loads(cfg.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{cfg}: not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{cfg}: must hold a JSON object")
    return config


def _open_directory(directory: Path, description: str | None = None) -> TensorSource:
    desc = description or str(directory)
    if not any(directory.iterdir()):
        raise CheckpointError(f"{directory}: the directory is empty (expected config.json and weights)")
    config = _load_config(directory)
    for index_name, cls in (("model.safetensors.index.json", SafetensorsSource),
                            ("pytorch_model.bin.index.json", TorchBinSource)):
        index = directory / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError):
                raise CheckpointError(f"{index}: not a valid shard index (needs a 'weight_map')") from None
            shards = sorted(set(weight_map.values()))
            missing = [s for s in shards if not (directory / s).is_file()]
            if missing:
                raise CheckpointError(f"{index}: shard {missing[0]} listed in the index is missing")
            return cls([directory / s for s in shards], config, desc)
    if (directory / "model.safetensors").is_file():
        return SafetensorsSource([directory / "model.safetensors"], config, desc)
    others = sorted(directory.glob("*.safetensors"))
    if others:
        return SafetensorsSource(others, config, desc)
    if (directory / "pytorch_model.bin").is_file():
        return TorchBinSource([directory / "pytorch_model.bin"], config, desc)
    raise CheckpointError(f"{directory}: no weights found (expected model.safetensors, a sharded "
                          "model.safetensors.index.json, or pytorch_model.bin)")


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def resolve_hub_id(repo_id: str, *, allow_download: bool | None = None, revision: str | None = None) -> Path:
    """Local snapshot directory of Hub model ``repo_id``.

    The local Hugging Face cache is always tried first. A download happens only when it is allowed
    (``allow_download=True``, or ``allow_download=None`` and ``BOUNDS_LIB_ALLOW_DOWNLOAD=1``) *and*
    ``HF_HUB_OFFLINE`` is not set; otherwise a missing model is a :class:`CheckpointError`.
    """
    from huggingface_hub import snapshot_download

    patterns = ["config.json", "*.safetensors", "model.safetensors.index.json"]
    try:
        path = Path(snapshot_download(repo_id, revision=revision, local_files_only=True,
                                      allow_patterns=patterns))
        if (path / "config.json").is_file() and (any(path.glob("*.safetensors")) or any(path.glob("*.bin"))):
            return path
    except Exception:
        pass
    allowed = _env_true(ALLOW_DOWNLOAD_ENV) if allow_download is None else bool(allow_download)
    offline = _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")
    if not allowed or offline:
        why = "HF_HUB_OFFLINE is set" if (allowed and offline) else f"downloads are off (set {ALLOW_DOWNLOAD_ENV}=1 or pass --allow-download)"
        raise CheckpointError(f"{repo_id!r} is neither an existing path nor a Hub model in the local cache, "
                              f"and {why}")
    try:
        path = Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
        if not any(path.glob("*.safetensors")):
            path = Path(snapshot_download(repo_id, revision=revision,
                                          allow_patterns=["config.json", "pytorch_model*.bin*"]))
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"cannot download {repo_id!r} from the Hub: {msg}") from None
    return path


def open_checkpoint(model, *, config: Mapping | None = None, allow_download: bool | None = None) -> TensorSource:
    """Open ``model`` as a :class:`TensorSource`.

    ``model`` may be a local directory (``str`` / ``Path``), a Hub id such as
    ``"google/bert_uncased_L-2_H-128_A-2"`` (see :func:`resolve_hub_id`), a ``torch.nn.Module`` with a
    ``.config`` (any Hugging Face model), a state dict (pass ``config=``), or an existing source.
    """
    if isinstance(model, TensorSource):
        return model
    if isinstance(model, Mapping):
        if config is None:
            raise CheckpointError("a state dict needs its model config: pass config=model.config.to_dict()")
        return StateDictSource(model, dict(config))
    if hasattr(model, "state_dict") and callable(model.state_dict):
        cfg = config
        if cfg is None:
            cfg_obj = getattr(model, "config", None)
            if cfg_obj is None:
                raise CheckpointError(f"{type(model).__name__} has no .config; pass config= explicitly")
            cfg = cfg_obj.to_dict() if hasattr(cfg_obj, "to_dict") else dict(cfg_obj)
        return StateDictSource(model.state_dict(), dict(cfg), f"in-memory {type(model).__name__}")
    if not isinstance(model, (str, os.PathLike)):
        raise CheckpointError(f"cannot read a model from a {type(model).__name__}; pass a directory, a Hub id, "
                              "a torch module or a state dict")
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_file():
            raise CheckpointError(f"{path}: is a file; pass the model directory that holds config.json and "
                                  "the weights")
        return _open_directory(path)
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep in text.replace("/", "")
    if looks_like_path or not _HUB_ID.fullmatch(text):
        raise CheckpointError(f"{text}: no such model directory")
    snapshot = resolve_hub_id(text, allow_download=allow_download)
    return _open_directory(snapshot, description=f"{text} (Hub cache: {snapshot})")


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------

_FAMILY_OF = {
    "bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "camembert": "bert", "electra": "bert",
    "distilbert": "distilbert", "gpt2": "gpt2",
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama",
}
#: ``config.json`` ``model_type`` values this module reads.
SUPPORTED_MODEL_TYPES = tuple(_FAMILY_OF)

# role -> tensor name suffix inside block ``{prefix}{stack}.{i}.``
_ROLES = {
    "bert": ("encoder.layer", {
        "q": "attention.self.query.weight", "k": "attention.self.key.weight",
        "v": "attention.self.value.weight", "o": "attention.output.dense.weight",
        "f_in": "intermediate.dense.weight", "f_out": "output.dense.weight"}),
    "distilbert": ("transformer.layer", {
        "q": "attention.q_lin.weight", "k": "attention.k_lin.weight", "v": "attention.v_lin.weight",
        "o": "attention.out_lin.weight", "f_in": "ffn.lin1.weight", "f_out": "ffn.lin2.weight"}),
    "gpt2": ("h", {
        "qkv": "attn.c_attn.weight", "o": "attn.c_proj.weight",
        "f_in": "mlp.c_fc.weight", "f_out": "mlp.c_proj.weight"}),
    "llama": ("layers", {
        "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
        "o": "self_attn.o_proj.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
        "down": "mlp.down_proj.weight"}),
}


@dataclass(frozen=True)
class ArchitectureSpec:
    """What the extraction needs to know about a model (read from ``config.json`` and the tensor names)."""

    family: str
    model_type: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    activation: str
    prefix: str
    gated_ffn: bool = False

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    def kv_group(self, h: int) -> int:
        """Key/value group read by query head ``h`` (Hugging Face ``repeat_kv`` order)."""
        return h // self.group_size

    def tensor_names(self, layer: int) -> dict:
        """``{role: full tensor name}`` for ``layer``."""
        stack, roles = _ROLES[self.family]
        return {r: f"{self.prefix}{stack}.{layer}.{s}" for r, s in roles.items()}

    def expected_shapes(self) -> dict:
        """``{role: (rows, cols)}`` as stored in the checkpoint."""
        N, H, Hk, d, F = self.hidden, self.n_heads, self.n_kv_heads, self.head_dim, self.d_ff
        if self.family in ("bert", "distilbert"):
            return {"q": (H * d, N), "k": (H * d, N), "v": (H * d, N), "o": (N, H * d),
                    "f_in": (F, N), "f_out": (N, F)}
        if self.family == "gpt2":
            return {"qkv": (N, 3 * N), "o": (N, N), "f_in": (N, F), "f_out": (F, N)}
        return {"q": (H * d, N), "k": (Hk * d, N), "v": (Hk * d, N), "o": (N, H * d),
                "gate": (F, N), "up": (F, N), "down": (N, F)}

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _cfg(config: dict, *keys, default=None, required=True, what=""):
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    if required and default is None:
        raise CheckpointError(f"config.json has no {keys[0]!r} ({what}); cannot read the model")
    return default


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"config.json: {name} must be a positive integer, got {value!r}")
    return value


def detect_architecture(source: TensorSource) -> ArchitectureSpec:
    """Read the layout of ``source`` from its config and tensor names, checking every layer's tensors.

    Raises :class:`CheckpointError` naming the problem: an unsupported ``model_type``, heads that do
    not divide the hidden size, a layer without one of its tensors, or a tensor of the wrong shape.
    """
    cfg = source.config
    model_type = cfg.get("model_type")
    if model_type is None:
        raise CheckpointError(f"{source.description}: config.json has no 'model_type'; supported: "
                              + ", ".join(SUPPORTED_MODEL_TYPES))
    family = _FAMILY_OF.get(str(model_type))
    if family is None:
        raise CheckpointError(f"{source.description}: unsupported architecture {model_type!r}; supported "
                              "model types: " + ", ".join(SUPPORTED_MODEL_TYPES))
    if family == "bert":
        L = _cfg(cfg, "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "hidden_size", what="hidden size")
        H = _cfg(cfg, "num_attention_heads", what="number of heads")
        F = _cfg(cfg, "intermediate_size", what="feed-forward width")
        act, Hk, hd = cfg.get("hidden_act", "gelu"), H, None
    elif family == "distilbert":
        L = _cfg(cfg, "n_layers", "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "dim", "hidden_size", what="hidden size")
        H = _cfg(cfg, "n_heads", "num_attention_heads", what="number of heads")
        F = _cfg(cfg, "hidden_dim", "intermediate_size", what="feed-forward width")
        act, Hk, hd = cfg.get("activation", "gelu"), H, None
    elif family == "gpt2":
        L = _cfg(cfg, "n_layer", "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "n_embd", "hidden_size", what="hidden size")
        H = _cfg(cfg, "n_head", "num_attention_heads", what="number of heads")
        F = cfg.get("n_inner") or (4 * N if isinstance(N, int) else None)
        act, Hk, hd = cfg.get("activation_function", "gelu_new"), H, None
    else:
        L = _cfg(cfg, "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "hidden_size", what="hidden size")
        H = _cfg(cfg, "num_attention_heads", what="number of heads")
        F = _cfg(cfg, "intermediate_size", what="feed-forward width")
        Hk = cfg.get("num_key_value_heads") or H
        hd = cfg.get("head_dim")
        act = cfg.get("hidden_act", "silu")
    L, N, H, Hk, F = (_positive_int(v, n) for v, n in
                      ((L, "number of layers"), (N, "hidden size"), (H, "number of heads"),
                       (Hk, "number of key/value heads"), (F, "feed-forward width")))
    if hd is None:
        if N % H:
            raise CheckpointError(f"{source.description}: {H} attention heads do not divide the hidden size "
                                  f"{N}; cannot split the projections into heads")
        hd = N // H
    hd = _positive_int(hd, "head_dim")
    if H % Hk:
        raise CheckpointError(f"{source.description}: {Hk} key/value heads do not divide {H} query heads")

    stack, roles = _ROLES[family]
    first = next(iter(roles.values()))
    pat = re.compile(r"^(.*?)" + re.escape(f"{stack}.0.{first}") + r"$")
    prefixes = sorted({m.group(1) for n in source.names() if (m := pat.match(n))}, key=len)
    if not prefixes:
        raise CheckpointError(f"{source.description}: no tensor named like '{stack}.0.{first}' — the weights "
                              f"do not match the {model_type!r} layout of config.json")
    spec = ArchitectureSpec(family=family, model_type=str(model_type), n_layers=L, hidden=N, n_heads=H,
                            n_kv_heads=Hk, head_dim=hd, d_ff=F, activation=str(act), prefix=prefixes[0],
                            gated_ffn=(family == "llama"))
    shapes = spec.expected_shapes()
    for layer in range(L):
        for role, name in spec.tensor_names(layer).items():
            if name not in source:
                raise CheckpointError(f"{source.description}: layer {layer} has no {roles[role]!r} tensor "
                                      f"(looked for {name!r}); the checkpoint is incomplete")
            got = tuple(source.shape(name))
            if got != shapes[role]:
                raise CheckpointError(f"{source.description}: tensor {name!r} has shape {got}, expected "
                                      f"{shapes[role]} from config.json")
    return spec


# --------------------------------------------------------------------------------------------
# Per-layer matrices
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerWeights:
    """One layer's weights in the row-vector convention (``X ↦ X W``).

    ``Wq`` (N×H·d_h), ``Wk``, ``Wv`` (N×H_kv·d_h), ``Wo`` (H·d_h×N), ``M_in`` (N×d_ff, or N×2d_ff for a
    gated feed-forward), ``M_out`` (d_ff×N). For ``nn.Linear`` layouts these are transposed *views* of
    the stored ``(out, in)`` arrays, so ``Wq[:, hs] @ Wk[:, hs].T`` is literally the released
    ``q[hs,:]ᵀ k[hs,:]``.
    """

    layer: int
    spec: ArchitectureSpec
    Wq: np.ndarray
    Wk: np.ndarray
    Wv: np.ndarray
    Wo: np.ndarray
    M_in: np.ndarray
    M_out: np.ndarray
    names: dict = field(default_factory=dict, compare=False)

    def _cols(self, h):
        d = self.spec.head_dim
        return slice(h * d, (h + 1) * d)

    def W_Q(self, h: int) -> np.ndarray:
        """``W_{Q,h}`` (N×d_h)."""
        return self.Wq[:, self._cols(h)]

    def W_K(self, h: int) -> np.ndarray:
        """``W_{K,h}`` (N×d_h) — the key group of query head ``h``."""
        return self.Wk[:, self._cols(self.spec.kv_group(h))]

    def W_V(self, h: int) -> np.ndarray:
        """``W_{V,h}`` (N×d_h) — the value group of query head ``h``."""
        return self.Wv[:, self._cols(self.spec.kv_group(h))]

    def W_O(self, h: int) -> np.ndarray:
        """``W_{O,h}`` (d_h×N) — the rows of the output projection that read head ``h``."""
        return self.Wo[self._cols(h), :]

    def QK(self, h: int) -> np.ndarray:
        """Explicit ``QK_h = W_{Q,h} W_{K,h}ᵀ`` (N×N); logits of head ``h`` are ``X QK_h Xᵀ``."""
        return self.W_Q(h) @ self.W_K(h).T

    def V_tilde(self, h: int) -> np.ndarray:
        """Explicit ``Ṽ_h = W_{V,h} W_{O,h}`` (N×N)."""
        return self.W_V(h) @ self.W_O(h)


def iter_layers(source: TensorSource, spec: ArchitectureSpec | None = None, *, dtype=np.float64,
                layers=None) -> Iterator[LayerWeights]:
    """Yield :class:`LayerWeights` one layer at a time (only that layer's tensors are in memory)."""
    spec = spec or detect_architecture(source)
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    idx = range(spec.n_layers) if layers is None else layers
    for layer in idx:
        if not 0 <= layer < spec.n_layers:
            raise ValueError(f"layer {layer} out of range 0..{spec.n_layers - 1}")
        names = spec.tensor_names(layer)
        t = {role: source.read(name, dtype) for role, name in names.items()}
        N = spec.hidden
        if spec.family == "gpt2":  # Conv1D: (in, out); c_attn columns [Q | K | V]
            qkv = t["qkv"]
            Wq, Wk, Wv = qkv[:, :N], qkv[:, N:2 * N], qkv[:, 2 * N:]
            Wo, M_in, M_out = t["o"], t["f_in"], t["f_out"]
        elif spec.gated_ffn:
            Wq, Wk, Wv, Wo = t["q"].T, t["k"].T, t["v"].T, t["o"].T
            M_in = np.concatenate([t["gate"].T, t["up"].T], axis=1)
            M_out = t["down"].T
        else:
            Wq, Wk, Wv, Wo = t["q"].T, t["k"].T, t["v"].T, t["o"].T
            M_in, M_out = t["f_in"].T, t["f_out"].T
        yield LayerWeights(layer, spec, Wq, Wk, Wv, Wo, M_in, M_out, names)
