"""Reading real Transformer checkpoints and extracting the paper's matrices (Chapter 6).

The paper's Section 6 (and the authors' released scripts) measures four kinds of
matrices in every layer ``ℓ`` of a trained model, in the row-vector convention ``X ↦ XW``:

* ``QK_{ℓ,h} = W_{Q,h} W_{K,h}ᵀ`` (N×N, rank ≤ d_h) — head ``h``'s attention logits are
  ``X QK_{ℓ,h} Xᵀ`` (biases, rotary embeddings and the ``1/√d_h`` scale left out, as released);
* ``Ṽ_{ℓ,h} = W_{V,h} W_{O,h}`` (N×N, rank ≤ d_h) — head ``h``'s contribution ``X Ṽ_{ℓ,h}`` to the
  attention output;
* ``M_in`` (N×d_ff) and ``M_out`` (d_ff×N) — the feed-forward maps around the activation.

Sources (:func:`open_checkpoint`): a local model directory (``config.json`` plus a single or sharded
safetensors file, or legacy PyTorch ``.bin`` files as a fallback — chosen as transformers'
``from_pretrained`` chooses, :func:`weight_files`), a Hugging Face Hub id resolved
through the local cache (downloading only when the user allows it and is online), or an in-memory
``torch.nn.Module`` / state dict. Tensors are read one at a time (the safetensors reader below seeks
to each tensor; nothing is mapped or loaded wholesale), half precision (f16, bf16) is widened exactly,
and everything is computed in float64 unless float32 is requested.

Validation (every failure is one :class:`CheckpointError` line naming the file and the problem):
safetensors headers follow the format library's own rules (no duplicate names, byte ranges disjoint
and covering the data section exactly; the library parses each file too, as a backstop —
:func:`read_safetensors_header`); a shard index is followed exactly (each tensor in the one shard
it names; a tensor stored in two files, a malformed ``weight_map`` or a shard path that leaves the
model folder is refused); JSON with duplicate keys or absurd nesting is refused; weights must be
real floating-point arrays (:func:`bounds_lib.core.validation.as_real_array`); a config declaring fewer
layers than the weights hold is refused unless a prefix is asked for; a file holding two layer stacks
(``student.``/``teacher.``) is refused unless ``prefix=`` names one; the activation must be one
transformers knows and whose Lipschitz constant is listed (:data:`ACTIVATION_L_PHI`); a ``.bin``
that is not weights-only is refused without running any of it. Hub downloads have a deadline, and so
has every request.

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
  factor is a proxy on the same footing as the released BERT one, not a bound. Qwen3 normalises
  every head's queries and keys (``q_norm``/``k_norm``, an RMSNorm per token) between the projections
  and the logits, so ``X QK_h Xᵀ`` is not its logit matrix (a known limitation: the projections are
  decomposed all the same; ``tests/test_architectures.py`` measures the difference).
* **Gemma / Gemma 2** (the LLaMA names): ``head_dim`` from the config (transformers' default 256 when
  absent — not ``N / H``), the GeGLU activation from ``hidden_act`` (Gemma; its legacy ``"gelu"`` is the
  tanh approximation, as transformers reads it) or ``hidden_activation`` (Gemma 2). Gemma's RMSNorm
  scales by ``1 + w`` and Gemma 2 caps its logits and scales them by ``query_pre_attn_scalar^{-1/2}``:
  norms and scalars, not matrices of the bound, so the analysed matrices are unchanged.
* **Phi-3** (``self_attn.qkv_proj``, ``mlp.gate_up_proj``): the fused query/key/value rows are
  ``[Q (H·d_h) | K (H_kv·d_h) | V (H_kv·d_h)]`` and the fused gate/up rows ``[gate | up]``, as
  ``Phi3Attention`` and ``Phi3MLP`` split their outputs.
* **GPT-NeoX** (``attention.query_key_value``): the fused rows are interleaved per head,
  ``[q_0 k_0 v_0 | q_1 k_1 v_1 | …]`` (d_h rows each), as ``GPTNeoXAttention`` views its output as
  ``(…, H, 3·d_h)``; the feed-forward is ``mlp.dense_h_to_4h`` / ``mlp.dense_4h_to_h``. With
  ``use_parallel_residual`` (the default) a block adds its attention and feed-forward outputs instead
  of composing them; the propagation factor keeps the released composed form, a proxy here too.
* **OPT** (``decoder.layers.i.self_attn.{q,k,v,out}_proj``, ``fc1``, ``fc2``; activation
  ``activation_function``). The ``word_embed_proj_dim`` projections (``project_in``/``project_out``)
  lie outside the blocks and are not read.
* **Mixtral** (mixture of experts; attention as LLaMA): every expert ``e`` of
  ``block_sparse_moe.experts.e.{w1, w3, w2}`` (gate, up, down) has its own ``M_in = [G_e | U_e]`` and
  ``M_out = down_e``, analysed as matrices of their own (the parts ``("M_in", e)``, ``("M_out", e)`` of
  :func:`layer_parts`; ``MatrixSpectrum.expert``). The router
  ``block_sparse_moe.gate`` is not a block matrix of the bound and is not read; the routing is not
  Lipschitz, so the propagation factor of these models is a proxy (:func:`bounds_lib.analysis.scoring.score`).
* **ViT** (``vit.encoder.layer.i.attention.attention.{query,key,value}``, ``attention.output.dense``,
  ``intermediate.dense``, ``output.dense``): BERT's orientation; the patch embedding is not read.

A transformers module is read in the layout ``save_pretrained`` writes (transformers 5 keeps Mixtral's
experts fused and ViT's projections renamed in memory; ``_saved_state_dict``).
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import struct
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator, Mapping

import numpy as np

from ..theory.propagation import LPHI_GELU_RELEASED
from ..core.validation import DuplicateKeyError, as_real_array, check_scalar, no_duplicate_keys

__all__ = [
    "CheckpointError",
    "SUPPORTED_MODEL_TYPES",
    "ACTIVATION_L_PHI",
    "ALLOW_DOWNLOAD_ENV",
    "TensorSource",
    "SafetensorsSource",
    "TorchBinSource",
    "StateDictSource",
    "ArchitectureSpec",
    "LayerWeights",
    "LAYER_PARTS",
    "layer_parts",
    "part_expert",
    "part_tensor_names",
    "open_checkpoint",
    "resolve_hub_id",
    "detect_architecture",
    "iter_layers",
    "read_safetensors_header",
    "weight_files",
    "WEIGHT_FILES",
    "random_bert_state_dict",
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


def loads_json(text, where: str, what: str = "JSON") -> object:
    """``json.loads`` that rejects duplicate keys and turns every failure into one :class:`CheckpointError`
    line — including nesting too deep for Python's parser (``RecursionError``)."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, object_pairs_hook=no_duplicate_keys)
    except DuplicateKeyError as exc:
        raise CheckpointError(f"{where}: {what} names {exc.args[0]!r} twice (duplicate key)") from None
    except RecursionError:
        raise CheckpointError(f"{where}: {what} is nested too deeply to be a real one (garbage?)") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{where}: {what} is not UTF-8 text (garbage header?)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{where}: {what} is not valid JSON ({exc.msg}, line {exc.lineno})") from None


def _nonneg_int(x) -> bool:
    """Whether a header entry is a count (an integer ``>= 0``, never a bool) under the library's one rule."""
    try:
        check_scalar(x, "header entry", int, min_val=0)
    except (TypeError, ValueError):
        return False
    return True


def read_safetensors_header(path) -> tuple[int, dict]:
    """Parse and validate a safetensors header; return ``(data_start, {name: entry})``.

    The rules are those of the format's own library (``safetensors`` ``Metadata::validate`` and
    ``deserialize``): an 8-byte little-endian header length within the file and ≤ 100 MB, a JSON object
    without duplicate names, every entry with a known dtype, a shape of non-negative integers and
    ``data_offsets`` whose length matches shape × dtype size, and byte ranges that — sorted — are
    disjoint and cover the data section exactly (no overlap: one tensor would read another's bytes;
    no gap; nothing past the end: a truncated download; nothing left over). Any violation raises
    :class:`CheckpointError` with one line saying which.

    Why this is written by hand, next to the library: ``safetensors`` exposes its parser only through
    ``safe_open`` (which memory-maps the file and, with NumPy, cannot return bfloat16) and through
    loading the whole buffer; we read one tensor at a time with ``seek``. So the header is parsed here
    with messages a user can act on, and then the library itself opens the file as a backstop
    (``_library_check``): a file it rejects is rejected here too, even for a rule not listed above.
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
        header = loads_json(raw, str(path), "safetensors header")
    except CheckpointError as exc:
        raise CheckpointError(f"{exc} (garbage header)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: safetensors header is not a JSON object (garbage header)")
    header.pop("__metadata__", None)
    data_len = size - 8 - n
    entries = {}
    for name, e in header.items():
        try:
            dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        except (KeyError, TypeError):
            raise CheckpointError(f"{path}: header entry for {name!r} lacks dtype/shape/data_offsets") from None
        if not isinstance(dtype, str) or dtype not in _ST_DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_nonneg_int(s) for s in shape):
            raise CheckpointError(f"{path}: tensor {name!r} has an invalid shape {shape!r} "
                                  "(a list of non-negative integers)")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_nonneg_int(o) for o in offsets)):
            raise CheckpointError(f"{path}: tensor {name!r} has invalid data_offsets {offsets!r}")
        b, end = offsets
        need = math.prod(shape) * _ST_DTYPES[dtype].itemsize  # Python ints: no overflow
        if not b <= end or end - b != need:
            raise CheckpointError(f"{path}: tensor {name!r} has inconsistent data offsets {b}..{end} "
                                  f"for shape {tuple(shape)} {dtype}")
        entries[name] = {"dtype": dtype, "shape": tuple(shape), "offsets": (b, end)}
    start, prev = 0, None
    for name, e in sorted(entries.items(), key=lambda kv: kv[1]["offsets"]):
        b, end = e["offsets"]
        if b < start:
            raise CheckpointError(f"{path}: tensors {prev!r} and {name!r} overlap (bytes {b}..{start}); "
                                  "one would read the other's data (corrupt header)")
        if b > start:
            raise CheckpointError(f"{path}: bytes {start}..{b} of the data section belong to no tensor "
                                  f"(gap before {name!r}; corrupt header)")
        start, prev = end, name
    if start > data_len:
        raise CheckpointError(f"{path}: tensor {prev!r} ends at byte {start} but the file holds only "
                              f"{data_len} data bytes (truncated file)")
    if start < data_len:
        raise CheckpointError(f"{path}: the last {data_len - start} bytes of the data section belong to no "
                              "tensor (corrupt header or wrong file)")
    _library_check(path)
    return 8 + n, entries


def _library_check(path: Path):
    """Let the ``safetensors`` library parse the header too (it maps the file but reads no tensor data)."""
    try:
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - safetensors is a dependency
        return
    try:
        with safe_open(str(path), framework="numpy"):
            pass
    except Exception as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, MemoryError) or "os error 12" in msg or "Cannot allocate memory" in msg:
            raise MemoryError(f"{path}: not enough memory to map the file ({msg}); the file was not judged — "
                              "raise the process's memory limit (ulimit -v, the job's memory) or free memory") from None
        raise CheckpointError(f"{path}: the safetensors library rejects the file ({msg})") from None


class TensorSource:
    """A set of named tensors plus the model's ``config`` dict, read one tensor at a time."""

    description: str = ""
    config: dict
    #: Where the tensors are stored — ``"safetensors"``, ``"pytorch-bin"`` or ``"in-memory"``.
    storage: str = ""

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
            if probe is A and np.all(np.isfinite(raw)):
                raise CheckpointError(f"{self.description}: tensor {name!r} has entries beyond the {A.dtype} "
                                      f"range (largest |entry| {float(np.max(np.abs(raw))):.3g}); analyse it "
                                      "in float64 (--dtype float64)")
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

    storage = "safetensors"

    def __init__(self, files, config: dict, description: str = "", weight_map: Mapping | None = None):
        self._init_files(files, config, description)
        self._where = {}
        for f in self.files:
            start, entries = read_safetensors_header(f)
            for name, e in entries.items():
                if name in self._where:
                    raise CheckpointError(f"{self.description}: tensor {name!r} is stored in two files, "
                                          f"{self._where[name][0].name} and {f.name}; which one is meant is "
                                          "ambiguous")
                self._where[name] = (f, start, e)
        _check_weight_map(self, weight_map, lambda name: self._where[name][0])

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


def _check_weight_map(source, weight_map, file_of):
    """Every tensor the shard index names must sit in exactly the shard (a path) the index names."""
    if weight_map is None:
        return
    for name, shard in weight_map.items():
        if name not in source._name_set():
            raise CheckpointError(f"{source.description}: the shard index lists tensor {name!r} in {shard.name}, "
                                  "but no shard holds it")
        if file_of(name) != shard:
            raise CheckpointError(f"{source.description}: the shard index puts tensor {name!r} in {shard.name}, "
                                  f"but it is stored in {file_of(name).name}")


class _MappingSource(TensorSource):
    """A source whose tensors sit in a dict ``self._tensors`` (torch tensors or NumPy arrays)."""

    def names(self):
        return list(self._tensors)

    def _array_like(self, name):
        """The stored value if it is an array (``shape`` and ``dtype``), else the validated array it
        converts to (a nested list) — a value that is no array at all is the validation's error."""
        t = self._tensors[name]
        return t if hasattr(t, "shape") and hasattr(t, "dtype") else self.read_raw(name)

    def shape(self, name):
        return tuple(self._array_like(name).shape)

    def dtype(self, name):
        return str(self._array_like(name).dtype).replace("torch.", "")

    def read_raw(self, name):
        try:
            return as_real_array(self._tensors[name], f"tensor {name!r}", allow_integer=False)
        except ValueError as exc:
            raise CheckpointError(f"{self.description}: {exc}") from None


class TorchBinSource(_MappingSource):
    """Legacy PyTorch ``pytorch_model.bin`` files (loaded with ``weights_only=True``, memory-mapped)."""

    storage = "pytorch-bin"

    def __init__(self, files, config: dict, description: str = "", weight_map: Mapping | None = None):
        import torch

        self._init_files(files, config, description)
        self._tensors, self._file_of = {}, {}
        for f in self.files:
            with warnings.catch_warnings():  # torch's UserWarnings (pickle protocol, …) are not ours to print
                warnings.simplefilter("ignore")
                try:
                    sd = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
                except Exception:
                    try:  # old (non-zip) serialisation cannot be memory-mapped: the plain weights-only load
                        sd = torch.load(f, map_location="cpu", weights_only=True)
                    except Exception as exc:  # this one says why: the weights-only refusal, or corruption
                        raise CheckpointError(f"{f}: {_torch_load_refusal(exc)}") from None
            if not isinstance(sd, Mapping):
                raise CheckpointError(f"{f}: does not contain a state dict")
            for name, t in sd.items():
                if name in self._tensors:
                    raise CheckpointError(f"{self.description}: tensor {name!r} is stored in two files, "
                                          f"{self._file_of[name].name} and {f.name}; which one is meant is "
                                          "ambiguous")
                self._tensors[name] = t
                self._file_of[name] = f
        _check_weight_map(self, weight_map, lambda name: self._file_of[name])


def _torch_load_refusal(exc: Exception) -> str:
    """One line from a failed ``torch.load(weights_only=True)``: what it refused (no code was run)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # torch bolds part of its message
    if "Weights only load failed" in text:
        # the reason follows "WeightsUnpickler error:" (on its line or the next); its first sentence only
        # (torch goes on to suggest allow-listing the global, which would run the file's code)
        m = (re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\.?$|\n)", text, re.S)
             or re.search(r"(Trying to load unsupported GLOBAL .+?)(?:\.\s|\.?$|\n)", text, re.S))
        why = " ".join(m.group(1).split()) if m else ""
        return ("refused: not a weights-only PyTorch file (torch.load(weights_only=True): "
                f"{why or 'it holds objects other than tensors'}); nothing from it was executed — convert the "
                "checkpoint to safetensors with code you trust")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"cannot read PyTorch weights ({first})"


class StateDictSource(_MappingSource):
    """An in-memory state dict (torch tensors or NumPy arrays) with its config."""

    storage = "in-memory"

    def __init__(self, state_dict: Mapping, config: dict, description: str = "in-memory state dict"):
        self._tensors = dict(state_dict)
        self.config = dict(config)
        self.description = description


# --------------------------------------------------------------------------------------------
# Opening a model: directory, Hub id, module, state dict
# --------------------------------------------------------------------------------------------

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?")


def _broken_link(path: Path) -> str | None:
    """Why ``path`` is a symbolic link that cannot be followed (a loop, a missing target), or ``None``."""
    if not os.path.islink(path) or os.path.exists(path):
        return None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link that loops back on itself (too many levels of symbolic links)"
        return f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
    return None  # pragma: no cover - raced: the link was fixed between the two calls


def _refuse_broken_link(path: Path, what: str):
    reason = _broken_link(path)
    if reason:
        raise CheckpointError(f"{path}: {what} {reason}; point it at a real file or remove it")


def _load_config(directory: Path) -> dict:
    cfg = directory / "config.json"
    _refuse_broken_link(cfg, "config.json")
    if not cfg.is_file():
        raise CheckpointError(f"{directory}: no config.json (a model directory needs config.json next to "
                              "its weights)")
    try:
        text = cfg.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{cfg}: cannot be read ({exc.strerror or exc})") from None
    config = loads_json(text, str(cfg), "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"{cfg}: must hold a JSON object")
    return config


def _shard_path(directory: Path, index: Path, shard) -> Path:
    """The file a shard index names, which must be a relative path inside the model folder.

    The check is on the *name* (no absolute path, no ``..``): a Hugging Face cache snapshot holds
    symlinks into a sibling ``blobs/`` folder, so resolving links would reject every cached model.
    """
    if not isinstance(shard, str) or not shard:
        raise CheckpointError(f"{index}: weight_map values must be shard file names (strings), got {shard!r}")
    if "\0" in shard:
        raise CheckpointError(f"{index}: shard path {shard!r} contains a NUL character (only file names inside "
                              "the folder are allowed)")
    pure = PurePosixPath(shard.replace("\\", "/"))
    if not pure.parts:
        raise CheckpointError(f"{index}: shard path {shard!r} names the model folder itself, not a file in it")
    if pure.is_absolute() or PureWindowsPath(shard).is_absolute() or PureWindowsPath(shard).drive \
            or ".." in pure.parts:
        raise CheckpointError(f"{index}: shard path {shard!r} leaves the model folder (only file names "
                              "inside the folder are allowed)")
    return directory / pure


def _read_weight_map(directory: Path, index: Path) -> dict:
    """``{tensor name: shard path}`` from a ``*.index.json``, validated."""
    doc = loads_json(index.read_bytes(), str(index), "shard index")
    if not isinstance(doc, dict) or "weight_map" not in doc:
        raise CheckpointError(f"{index}: not a valid shard index (needs a 'weight_map' object)")
    wm = doc["weight_map"]
    if not isinstance(wm, dict):
        raise CheckpointError(f"{index}: 'weight_map' must be an object mapping tensor names to shard files, "
                              f"got a {type(wm).__name__}")
    if not wm:
        raise CheckpointError(f"{index}: 'weight_map' is empty")
    return {name: _shard_path(directory, index, shard) for name, shard in wm.items()}


#: Weight files of a model folder in the order transformers' ``from_pretrained`` looks for them (the first
#: one present is loaded, whatever else the folder holds): single safetensors file, safetensors shard
#: index, PyTorch file, PyTorch shard index.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def _sharded(directory: Path, index: Path, cls, config: dict, desc: str) -> TensorSource:
    weight_map = _read_weight_map(directory, index)
    shards = sorted(set(weight_map.values()))
    for s in shards:
        if not s.is_file():
            name = os.fspath(s.relative_to(directory))
            reason = _broken_link(s) or ("is not a regular file" if os.path.lexists(s) else "is missing")
            raise CheckpointError(f"{index}: shard {name} listed in the index {reason}")
    return cls(shards, config, desc, weight_map=weight_map)


def weight_files(directory) -> list[Path]:
    """The files :func:`open_checkpoint` reads for the model folder ``directory`` (index and shards included).

    The choice is transformers' (``_get_resolved_checkpoint_files``): the file ``config.json`` names
    in ``transformers_weights``, else the first of :data:`WEIGHT_FILES` present — so a stale
    ``model.safetensors`` next to a shard index is what both read; a folder with none of them falls
    back to its ``*.safetensors`` files (transformers refuses such a folder).
    """
    directory = Path(directory)
    config = _load_config(directory)
    name, _ = _choose_weights(directory, config)
    if name.endswith(".index.json"):
        return [directory / name, *sorted(set(_read_weight_map(directory, directory / name).values()))]
    if name == "*.safetensors":
        return sorted(directory.glob("*.safetensors"))
    return [directory / name]


def _choose_weights(directory: Path, config: dict) -> tuple[str, type]:
    """``(file name, source class)`` of the weights transformers would load from ``directory``."""
    explicit = config.get("transformers_weights")
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit.endswith((".safetensors", ".safetensors.index.json")):
            raise CheckpointError(f"{directory / 'config.json'}: transformers_weights = {explicit!r} is neither a "
                                  "*.safetensors file nor a *.safetensors.index.json shard index (as transformers "
                                  "requires)")
        path = _shard_path(directory, directory / "config.json", explicit)
        if not path.is_file():
            raise CheckpointError(f"{directory / 'config.json'}: transformers_weights names {explicit!r}, which is "
                                  "not a file of the model folder")
        return os.fspath(path.relative_to(directory)), SafetensorsSource
    for name in WEIGHT_FILES:
        _refuse_broken_link(directory / name, "the weight file")
        if (directory / name).is_file():
            return name, (SafetensorsSource if "safetensors" in name else TorchBinSource)
    found = sorted(directory.glob("*.safetensors"))
    for path in found:
        _refuse_broken_link(path, "the weight file")
    if found:
        return "*.safetensors", SafetensorsSource
    raise CheckpointError(f"{directory}: no weights found (expected model.safetensors, a sharded "
                          "model.safetensors.index.json, or pytorch_model.bin)")


def _open_directory(directory: Path, description: str | None = None) -> TensorSource:
    desc = description or str(directory)
    if not any(directory.iterdir()):
        raise CheckpointError(f"{directory}: the directory is empty (expected config.json and weights)")
    config = _load_config(directory)
    name, cls = _choose_weights(directory, config)
    if name.endswith(".index.json"):
        return _sharded(directory, directory / name, cls, config, desc)
    if name == "*.safetensors":
        return SafetensorsSource(sorted(directory.glob("*.safetensors")), config, desc)
    return cls([directory / name], config, desc)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


#: Default deadline (seconds) of a whole Hub download; ``download_timeout=`` / ``--download-timeout``.
DOWNLOAD_TIMEOUT_S = 600.0
#: Seconds any single network request may wait for the server (connect, or between two reads).
REQUEST_TIMEOUT_S = 20.0
#: The longest deadline a download may be given (one week; far beyond it ``Thread.join`` overflows).
MAX_DOWNLOAD_TIMEOUT_S = 7 * 24 * 3600.0


def check_download_timeout(value, name: str = "download_timeout") -> float:
    """``value`` as seconds in ``(0, MAX_DOWNLOAD_TIMEOUT_S]``; :class:`TypeError`/:class:`ValueError` otherwise."""
    v = check_scalar(value, name, float)  # TypeError for a wrong type, ValueError for NaN or ±inf
    if not 0 < v <= MAX_DOWNLOAD_TIMEOUT_S:
        raise ValueError(f"{name} must be a positive number of seconds, at most {MAX_DOWNLOAD_TIMEOUT_S:g} "
                         f"(one week), got {value!r}")
    return v


@contextlib.contextmanager
def _requests_time_out(seconds: float):
    """Every request huggingface_hub makes meanwhile waits at most ``seconds`` for the server.

    huggingface_hub's shared HTTP client has no timeout (``timeout=None``), and some calls pass an
    explicit ``timeout=None`` (``repo_info``, which ``snapshot_download`` sends first), which the
    client's own default cannot override: a stalled server would hold them until the overall
    deadline. So the client factory in use (the default, or the user's, with its proxies and
    certificates) is wrapped with a request hook that gives every phase without a timeout (connect,
    read, write, pool) ``seconds``; timeouts a call sets itself (``HF_HUB_DOWNLOAD_TIMEOUT``,
    ``etag_timeout``) are kept. The factory is restored afterwards.
    """
    from huggingface_hub.utils import _http

    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    def bound(request):
        t = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {k: seconds if t.get(k) is None else t[k]
                                         for k in ("connect", "read", "write", "pool")}

    def factory():
        client = previous()
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "request": [*hooks.get("request", []), bound]}
        return client

    _http.set_client_factory(factory)
    try:
        yield
    finally:
        _http.set_client_factory(previous)


def _run_with_deadline(fn, deadline: float, what: str):
    """``fn()`` in a daemon thread; :class:`CheckpointError` if it has not returned after ``deadline`` s.

    A blocked request cannot be cancelled from outside in Python; the thread is abandoned (daemon: it
    never keeps the process alive) and the caller gets one clear line instead of a hang.
    """
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    t = threading.Thread(target=target, name="bounds-lib-download", daemon=True)
    t.start()
    t.join(deadline)
    if t.is_alive():
        raise CheckpointError(f"{what} did not finish within {deadline:g} s (the server did not answer in "
                              "time; raise --download-timeout, or check the network)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def resolve_hub_id(repo_id: str, *, allow_download: bool | None = None, revision: str | None = None,
                   download_timeout: float | None = None, endpoint: str | None = None) -> Path:
    """Local snapshot directory of Hub model ``repo_id``.

    The local Hugging Face cache is always tried first. A download happens only when it is allowed
    (``allow_download=True``, or ``allow_download=None`` and ``BOUNDS_LIB_ALLOW_DOWNLOAD=1``) *and*
    ``HF_HUB_OFFLINE`` is not set; otherwise a missing model is a :class:`CheckpointError`.
    Every request waits at most ``REQUEST_TIMEOUT_S`` for the server (``_requests_time_out``), and
    the whole download at most ``download_timeout`` seconds (default ``DOWNLOAD_TIMEOUT_S``, at most
    ``MAX_DOWNLOAD_TIMEOUT_S``); then a :class:`CheckpointError`.
    ``endpoint``: the Hub's address (default ``HF_ENDPOINT`` or huggingface.co).
    """
    from huggingface_hub import snapshot_download

    deadline = DOWNLOAD_TIMEOUT_S if download_timeout is None else check_download_timeout(download_timeout)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
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
        why = ("HF_HUB_OFFLINE is set" if (allowed and offline)
               else f"downloads are off (set {ALLOW_DOWNLOAD_ENV}=1 or pass --allow-download)")
        raise CheckpointError(f"{repo_id!r} is neither an existing path nor a Hub model in the local cache, "
                              f"and {why}")
    request_timeout = min(REQUEST_TIMEOUT_S, deadline)

    def download():
        # etag_timeout bounds the metadata requests; file transfers use huggingface_hub's own read
        # timeout (HF_HUB_DOWNLOAD_TIMEOUT, 10 s by default); the deadline bounds retries and the total
        kw = dict(revision=revision, etag_timeout=request_timeout, endpoint=endpoint)
        path = Path(snapshot_download(repo_id, allow_patterns=patterns, **kw))
        if not any(path.glob("*.safetensors")):
            path = Path(snapshot_download(repo_id, allow_patterns=["config.json", "pytorch_model*.bin*"], **kw))
        return path

    try:
        with _requests_time_out(request_timeout):
            return _run_with_deadline(download, deadline, f"downloading {repo_id!r} from the Hub")
    except CheckpointError:
        raise
    except Exception as exc:
        msg = " ".join(str(exc).split()[:40]) if str(exc) else type(exc).__name__
        raise CheckpointError(f"cannot download {repo_id!r} from the Hub: {msg}") from None


def _saved_state_dict(model) -> dict:
    """A module's tensors under the names and in the layout ``save_pretrained`` writes them.

    transformers 5 keeps some layouts differently in memory than on disk (Mixtral's experts as one
    fused ``(E, 2·d_ff, N)`` tensor, ViT's projections renamed) and converts them back when saving
    (``revert_weight_conversion``); the same conversion here lets a module be read by the layouts of
    saved checkpoints. Any other module's ``state_dict()`` is used as it is.
    """
    sd = model.state_dict()
    transformers = sys.modules.get("transformers")  # a transformers model has imported it already
    if transformers is None or not isinstance(model, transformers.PreTrainedModel):
        return sd
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4: memory and disk layouts are the same
        return sd
    return revert_weight_conversion(model, sd)


def open_checkpoint(model, *, config: Mapping | None = None, allow_download: bool | None = None,
                    download_timeout: float | None = None) -> TensorSource:
    """Open ``model`` as a :class:`TensorSource` (Chapter 6): nothing but the header and config is read.

    Parameters
    ----------
    model : str, os.PathLike, torch.nn.Module, mapping or TensorSource
        A local model directory (``config.json`` plus safetensors or PyTorch weights, sharded or not);
        a Hub id such as ``"google/bert_uncased_L-2_H-128_A-2"`` resolved through the local cache
        (:func:`resolve_hub_id`); a ``torch.nn.Module`` with a ``.config`` (any Hugging Face model); a
        state dict ``{name: tensor or array}`` (pass ``config=``); or an existing source (returned).
    config : mapping, optional
        The model's ``config.json`` content, for a state dict (overrides a module's ``.config``).
    allow_download : bool, optional
        Download a Hub id missing from the cache (default: the ``BOUNDS_LIB_ALLOW_DOWNLOAD``
        environment switch; never while ``HF_HUB_OFFLINE`` is set).
    download_timeout : float, optional
        Deadline of a download in seconds.

    Returns
    -------
    TensorSource
        Tensors read one at a time (:meth:`TensorSource.read`), with ``config``, ``description`` and
        ``storage`` (``"safetensors"``, ``"pytorch-bin"`` or ``"in-memory"``).

    Raises
    ------
    CheckpointError
        (a :class:`ValueError`) with one line naming the problem: no such directory, an empty
        argument, a file instead of a folder, a state dict without config, a Hub id not in the cache
        while downloads are off, a corrupted or truncated weight file, and so on.

    Examples
    --------
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=4, n_heads=2, d_ff=8)
    >>> src = open_checkpoint(sd, config=cfg)
    >>> src.storage, src.shape("encoder.layer.0.attention.self.query.weight")
    ('in-memory', (4, 4))
    >>> open_checkpoint("./no/such/model")
    Traceback (most recent call last):
        ...
    bounds_lib.checkpoints.CheckpointError: ./no/such/model: no such model directory
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
        return StateDictSource(_saved_state_dict(model), dict(cfg), f"in-memory {type(model).__name__}")
    if not isinstance(model, (str, os.PathLike)):
        raise CheckpointError(f"cannot read a model from a {type(model).__name__}; pass a directory, a Hub id, "
                              "a torch module or a state dict")
    text = os.fspath(model)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text.strip():
        raise CheckpointError("the model argument is empty; pass a model directory or a Hub id")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~nouser/x": no such user
        raise CheckpointError(f"{text}: cannot expand {text.split('/')[0]!r} (no such user); "
                              "pass the model directory's full path") from None
    if path.exists():
        if path.is_file():
            raise CheckpointError(f"{path}: is a file; pass the model directory that holds config.json and "
                                  "the weights")
        return _open_directory(path)
    reason = _broken_link(path)
    if reason:
        raise CheckpointError(f"{path}: the model folder {reason}")
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep in text.replace("/", "")
    if looks_like_path or not _HUB_ID.fullmatch(text):
        raise CheckpointError(f"{text}: no such model directory")
    snapshot = resolve_hub_id(text, allow_download=allow_download, download_timeout=download_timeout)
    return _open_directory(snapshot, description=f"{text} (Hub cache: {snapshot})")


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------

# ``config.json`` model_type -> layout family (the tensor names and how they split into the paper's matrices)
_FAMILY_OF = {
    "bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "camembert": "bert", "electra": "bert",
    "distilbert": "distilbert", "gpt2": "gpt2",
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama",
    "gemma": "gemma", "gemma2": "gemma",
    "phi3": "phi3", "gpt_neox": "gpt_neox", "opt": "opt", "mixtral": "mixtral", "vit": "vit",
}
#: ``config.json`` ``model_type`` values this module reads.
SUPPORTED_MODEL_TYPES = tuple(_FAMILY_OF)


def _silu_lipschitz() -> float:
    """``max_x SiLU'(x)`` with ``SiLU(x) = x σ(x)``: ``SiLU'' = σ'(x)(2 + x(1 − 2σ(x))) = 0`` where
    ``x tanh(x/2) = 2`` (bisection on [2, 3]); the value ``σ(x)(1 + x(1 − σ(x))) = 1.0998…``. QuickGELU,
    ``x σ(1.702 x)``, has the same maximum slope (substitute ``u = 1.702 x``)."""
    lo, hi = 2.0, 3.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid * math.tanh(mid / 2) < 2.0 else (lo, mid)
    x = 0.5 * (lo + hi)
    s = 1.0 / (1.0 + math.exp(-x))
    return s * (1.0 + x * (1.0 - s))


#: The activations a checkpoint may name (transformers' ``ACT2FN`` keys) and the global Lipschitz
#: constant ``L_φ`` the proxies use for each (Chapter 3's ``Λ``): every GELU variant (exact ``erf``,
#: tanh and sigmoid approximations, clipped) the released ``1.13`` (their largest slope is 1.12890…
#: resp. 1.12899…); SiLU/Swish and QuickGELU ``1.0998…``; ReLU, ReLU6, leaky ReLU (slope 0.01), tanh
#: and the identity 1; the sigmoid 1/4. Names transformers knows without a global constant here
#: (``relu2``, ``prelu``, ``xielu``, …) are refused, as are names transformers does not know.
ACTIVATION_L_PHI = {
    **dict.fromkeys(("gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh",
                     "gelu_python_tanh", "gelu_accurate"), LPHI_GELU_RELEASED),
    **dict.fromkeys(("silu", "swish", "quick_gelu"), _silu_lipschitz()),
    **dict.fromkeys(("relu", "relu6", "leaky_relu", "tanh", "linear"), 1.0),
    "sigmoid": 0.25,
}

# role -> tensor name suffix inside block ``{prefix}{stack}.{i}.``; ``{e}`` stands for an expert's index
_LLAMA_ATTENTION = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
                    "o": "self_attn.o_proj.weight"}
_LLAMA_BLOCK = {**_LLAMA_ATTENTION, "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
                "down": "mlp.down_proj.weight"}
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
    "llama": ("layers", _LLAMA_BLOCK),
    "gemma": ("layers", _LLAMA_BLOCK),  # Gemma's blocks name their tensors as LLaMA's do
    "phi3": ("layers", {
        "qkv": "self_attn.qkv_proj.weight", "o": "self_attn.o_proj.weight",
        "gate_up": "mlp.gate_up_proj.weight", "down": "mlp.down_proj.weight"}),
    "gpt_neox": ("layers", {
        "qkv": "attention.query_key_value.weight", "o": "attention.dense.weight",
        "f_in": "mlp.dense_h_to_4h.weight", "f_out": "mlp.dense_4h_to_h.weight"}),
    "opt": ("decoder.layers", {
        "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
        "o": "self_attn.out_proj.weight", "f_in": "fc1.weight", "f_out": "fc2.weight"}),
    # the router block_sparse_moe.gate is not a matrix of the bound and is not read
    "mixtral": ("layers", {
        **_LLAMA_ATTENTION, "gate": "block_sparse_moe.experts.{e}.w1.weight",
        "up": "block_sparse_moe.experts.{e}.w3.weight", "down": "block_sparse_moe.experts.{e}.w2.weight"}),
    "vit": ("encoder.layer", {
        "q": "attention.attention.query.weight", "k": "attention.attention.key.weight",
        "v": "attention.attention.value.weight", "o": "attention.output.dense.weight",
        "f_in": "intermediate.dense.weight", "f_out": "output.dense.weight"}),
}
#: Families with a gated feed-forward ``down(φ(x G) ⊙ x U)`` (``M_in = [G | U]``).
_GATED = frozenset({"llama", "gemma", "phi3", "mixtral"})
#: Families whose configs may declare grouped-query attention (``num_key_value_heads``).
_GQA = frozenset({"llama", "gemma", "phi3", "mixtral"})
#: Families storing the query, key and value projections as one tensor (split by ``_read_attention``).
_FUSED_QKV = frozenset({"gpt2", "phi3", "gpt_neox"})


@dataclass(frozen=True)
class ArchitectureSpec:
    """What the extraction needs to know about a model (read from ``config.json`` and the tensor names).

    ``family`` is the tensor layout (one per row of the module docstring's list; the ``model_type``
    values of :data:`SUPPORTED_MODEL_TYPES` map onto them); ``n_experts`` is the number of
    feed-forward experts per layer of a mixture-of-experts model (Mixtral), 0 for a dense one.
    """

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
    n_experts: int = 0

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def experts(self) -> tuple:
        """``(0, …, E − 1)`` for a mixture-of-experts feed-forward, ``(None,)`` for a dense one (every layer)."""
        return tuple(range(self.n_experts)) if self.n_experts else (None,)

    def kv_group(self, h: int) -> int:
        """Key/value group read by query head ``h`` (Hugging Face ``repeat_kv`` order)."""
        return h // self.group_size

    def tensor_names(self, layer: int) -> dict:
        """``{role: full tensor name}`` for ``layer``; an expert's roles are ``"gate.e"``, ``"up.e"``, ``"down.e"``."""
        stack, roles = _ROLES[self.family]
        block = f"{self.prefix}{stack}.{layer}."
        names = {r: block + s for r, s in roles.items() if "{e}" not in s}
        for e in range(self.n_experts):
            names.update({f"{r}.{e}": block + s.format(e=e) for r, s in roles.items() if "{e}" in s})
        return names

    def expected_shapes(self) -> dict:
        """``{role: (rows, cols)}`` as stored in the checkpoint (the keys of :meth:`tensor_names`)."""
        N, H, Hk, d, F = self.hidden, self.n_heads, self.n_kv_heads, self.head_dim, self.d_ff
        linear_ffn = {"f_in": (F, N), "f_out": (N, F)}
        attention = {"q": (H * d, N), "k": (Hk * d, N), "v": (Hk * d, N), "o": (N, H * d)}
        if self.family == "gpt2":  # Conv1D stores (in, out)
            return {"qkv": (N, 3 * N), "o": (N, N), "f_in": (N, F), "f_out": (F, N)}
        if self.family == "gpt_neox":
            return {"qkv": (3 * H * d, N), "o": (N, H * d), **linear_ffn}
        if self.family == "phi3":
            return {"qkv": ((H + 2 * Hk) * d, N), "o": (N, H * d), "gate_up": (2 * F, N), "down": (N, F)}
        if self.family == "mixtral":
            experts = {f"{r}.{e}": shape for e in range(self.n_experts)
                       for r, shape in (("gate", (F, N)), ("up", (F, N)), ("down", (N, F)))}
            return {**attention, **experts}
        if self.gated_ffn:
            return {**attention, "gate": (F, N), "up": (F, N), "down": (N, F)}
        return {**attention, **linear_ffn}

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
    """``value`` checked by :func:`~bounds_lib.core.validation.check_scalar`; a bad config is a
    :class:`CheckpointError`."""
    try:
        return check_scalar(value, name, int, min_val=1)
    except (TypeError, ValueError):  # a file's content, not an argument: one message, one error class
        raise CheckpointError(f"config.json: {name} must be a positive integer, got {value!r}") from None


def _activation(config: dict, key: str, default: str, description: str) -> str:
    """The activation named by ``config[key]`` (``default`` when the key is absent), as transformers reads it.

    transformers builds the activation with ``ACT2FN[name]``, which raises for a name it does not know,
    so such a model does not load there; it is refused here too, and so is a name whose global Lipschitz
    constant :data:`ACTIVATION_L_PHI` does not hold (``relu2``, ``prelu``, …: the propagation
    factor needs one).
    """
    act = config.get(key, default)
    if not isinstance(act, str) or act not in ACTIVATION_L_PHI:
        raise CheckpointError(f"{description}: config.json {key} = {act!r} is not a supported activation; "
                              "supported: " + ", ".join(sorted(ACTIVATION_L_PHI)))
    return act


def _stack_prefix(source: TensorSource, stack: str, first: str, model_type, prefix):
    """The one name prefix under which ``source`` holds the layer stack; ambiguity is refused.

    A file with two stacks (``student.``/``teacher.``, ``encoder_q.``/``encoder_k.``) holds two models;
    picking one by a rule the user did not choose would analyse either silently, so the candidates are
    listed and ``prefix`` must name one.
    """
    pat = re.compile(r"^(.*?)" + re.escape(f"{stack}.0.{first}") + r"$")
    found = sorted({m.group(1) for n in source.names() if (m := pat.match(n))}, key=lambda p: (len(p), p))
    if not found:
        raise CheckpointError(f"{source.description}: no tensor named like '{stack}.0.{first}' — the weights "
                              f"do not match the {model_type!r} layout of config.json"
                              + _in_memory_hint(source, _FAMILY_OF.get(str(model_type))))
    shown = ", ".join(repr(p) for p in found)
    if prefix is not None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a tensor-name prefix (str), got {type(prefix).__name__} {prefix!r}")
        if prefix not in found:
            raise CheckpointError(f"{source.description}: no layer stack under the prefix {prefix!r}; the "
                                  f"weights hold one under {shown}")
        return prefix
    if len(found) > 1:
        raise CheckpointError(f"{source.description}: the weights hold {len(found)} {model_type!r} layer stacks, "
                              f"under the prefixes {shown}; which one to analyse is ambiguous — choose one "
                              "with --prefix (prefix= in Python)")
    return found[0]


def detect_architecture(source: TensorSource, *, allow_extra_layers: bool = False,
                        prefix: str | None = None) -> ArchitectureSpec:
    """Read the layout of ``source`` from its config and tensor names, checking every layer's tensors.

    Raises :class:`CheckpointError` naming the problem: an unsupported ``model_type`` or activation,
    heads that do not divide the hidden size, a size that is not a positive integer (``n_inner: 0``
    included: transformers would build a zero-width layer), two layer stacks under different name
    prefixes (unless ``prefix`` names one of them), a layer without one of its tensors, a tensor of
    the wrong shape, or weights with more layers than ``config.json`` declares (unless
    ``allow_extra_layers``: the caller analyses a prefix on purpose).
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
    desc = source.description
    # the tensor names first: a config whose model_type lies about the weights is named as such, not as
    # a size the other family's config lacks
    stack, roles = _ROLES[family]
    first = next(iter(roles.values()))
    stack_prefix = _stack_prefix(source, stack, first, model_type, prefix)
    # absent keys take transformers' config defaults; a key present with a falsy value (0, "") is
    # validated, never replaced by the default (transformers tests ``is None``, not truth)
    hd, E = None, 0
    if family == "distilbert":
        L = _cfg(cfg, "n_layers", "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "dim", "hidden_size", what="hidden size")
        H = _cfg(cfg, "n_heads", "num_attention_heads", what="number of heads")
        F = _cfg(cfg, "hidden_dim", "intermediate_size", what="feed-forward width")
        act = _activation(cfg, "activation", "gelu", desc)
    elif family == "gpt2":
        L = _cfg(cfg, "n_layer", "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "n_embd", "hidden_size", what="hidden size")
        H = _cfg(cfg, "n_head", "num_attention_heads", what="number of heads")
        # transformers' GPT-2 MLP: ``n_inner if n_inner is not None else 4 * hidden_size``
        F = cfg.get("n_inner")
        if F is None:
            F = 4 * _positive_int(N, "hidden size")
        act = _activation(cfg, "activation_function", "gelu_new", desc)
    else:
        L = _cfg(cfg, "num_hidden_layers", what="number of layers")
        N = _cfg(cfg, "hidden_size", what="hidden size")
        H = _cfg(cfg, "num_attention_heads", what="number of heads")
        F = _cfg(cfg, "ffn_dim" if family == "opt" else "intermediate_size", what="feed-forward width")
        act = _family_activation(cfg, family, str(model_type), desc)
    Hk = H
    if family in _GQA:
        Hk = cfg.get("num_key_value_heads")
        Hk = H if Hk is None else Hk
        hd = cfg.get("head_dim")
        if hd is None and family == "gemma":
            hd = 256  # GemmaConfig / Gemma2Config default: Gemma's head_dim is not hidden_size / heads
    if family == "mixtral":
        E = cfg.get("num_local_experts")
        E = _positive_int(8 if E is None else E, "number of experts (num_local_experts)")
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

    spec = ArchitectureSpec(family=family, model_type=str(model_type), n_layers=L, hidden=N, n_heads=H,
                            n_kv_heads=Hk, head_dim=hd, d_ff=F, activation=act,
                            prefix=stack_prefix,
                            gated_ffn=family in _GATED, n_experts=E)
    extra = f"{spec.prefix}{stack}.{L}.{first}"
    if extra in source and not allow_extra_layers:
        n_found = L
        while f"{spec.prefix}{stack}.{n_found}.{first}" in source:
            n_found += 1
        raise CheckpointError(f"{source.description}: config.json says {L} layers but the weights hold at "
                              f"least {n_found}; fix config.json, or pass --layers K (n_layers=K) to analyse "
                              "the first K layers on purpose")
    shapes = spec.expected_shapes()
    for layer in range(L):
        block = f"{spec.prefix}{stack}.{layer}."
        for role, name in spec.tensor_names(layer).items():
            if name not in source:
                raise CheckpointError(f"{source.description}: layer {layer} has no {name[len(block):]!r} tensor "
                                      f"(looked for {name!r}); the checkpoint is incomplete"
                                      + _in_memory_hint(source, family))
            got = tuple(source.shape(name))
            if got != shapes[role]:
                raise CheckpointError(f"{source.description}: tensor {name!r} has shape {got}, expected "
                                      f"{shapes[role]} from config.json{_shape_hint(spec, role)}")
    if E:
        n_found = E
        while f"{spec.prefix}{stack}.0.{roles['gate'].format(e=n_found)}" in source:
            n_found += 1
        if n_found > E:
            raise CheckpointError(f"{source.description}: config.json says {E} experts per layer "
                                  f"(num_local_experts) but layer 0 holds at least {n_found}; fix config.json")
    return spec


#: A tensor-name ending that only transformers 5's in-memory layout of a family has (not its saved one).
_IN_MEMORY_MARKERS = {"mixtral": "mlp.experts.gate_up_proj", "vit": "attention.q_proj.weight"}


def _in_memory_hint(source: TensorSource, family: str | None) -> str:
    """A hint for a state dict taken from a transformers 5 module whose memory layout is not the saved one."""
    marker = _IN_MEMORY_MARKERS.get(family)
    if marker is None or not any(n.endswith(marker) for n in source.names()):
        return ""
    return (f" (these are transformers' in-memory names ('…{marker}'): pass the model itself, or a folder "
            "written by save_pretrained)")


def _family_activation(cfg: dict, family: str, model_type: str, description: str) -> str:
    """The feed-forward activation of a ``family`` as its transformers class reads it from ``cfg``."""
    if model_type == "gemma2":  # Gemma2MLP: ACT2FN[config.hidden_activation]
        return _activation(cfg, "hidden_activation", "gelu_pytorch_tanh", description)
    if family == "gemma":
        # GemmaConfig rewrites the legacy "gelu" of the official releases to the tanh approximation
        # it was meant to be (the same L_φ either way)
        act = _activation(cfg, "hidden_act", "gelu_pytorch_tanh", description)
        return "gelu_pytorch_tanh" if act == "gelu" else act
    if family == "opt":
        return _activation(cfg, "activation_function", "relu", description)
    default = "silu" if family in _GATED else "gelu"
    return _activation(cfg, "hidden_act", default, description)


def _shape_hint(spec: ArchitectureSpec, role: str) -> str:
    """What the expected shape of a fused tensor is made of (``""`` for the others)."""
    H, Hk, d, F = spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_ff
    if role == "qkv" and spec.family == "phi3":
        return (f" (rows [q | k | v] = ({H} + 2·{Hk} key/value heads) × head_dim {d}; check num_attention_heads, "
                "num_key_value_heads and head_dim)")
    if role == "qkv" and spec.family == "gpt_neox":
        return f" (rows: {H} heads × [q | k | v] × head_dim {d}; check num_attention_heads)"
    if role == "gate_up":
        return f" (rows [gate | up] = 2 × intermediate_size {F})"
    if role in ("q", "k", "v", "o") and spec.family in _GQA:
        return f" ({H} query heads, {Hk} key/value heads, head_dim {d}; check num_key_value_heads and head_dim)"
    return ""


def random_bert_state_dict(n_layers: int = 2, hidden: int = 8, n_heads: int = 2, d_ff: int = 16, *,
                           seed: int = 0, std: float = 0.5) -> tuple[dict, dict]:
    """A tiny BERT-layout model with Gaussian weights, in memory: ``(state_dict, config)``.

    For examples and tests: ``open_checkpoint(state_dict, config=config)`` reads it like a saved BERT
    checkpoint (attention and feed-forward weights of every layer, ``nn.Linear`` ``(out, in)`` layout,
    float64; no embeddings, biases or layer norms, which the analysis does not read).

    Parameters
    ----------
    n_layers, hidden, n_heads, d_ff : int
        Layers, hidden size ``N`` (a multiple of ``n_heads``), attention heads, feed-forward width.
    seed : int
        Seed of ``numpy.random.default_rng``.
    std : float
        Standard deviation of the entries.

    Returns
    -------
    tuple of (dict, dict)
        ``{tensor name: ndarray}`` and the ``config.json`` content.

    Raises
    ------
    TypeError
        A size or the seed is not an integer, or ``std`` not a real number.
    ValueError
        A size below 1, ``n_heads`` not dividing ``hidden``, or ``std`` not positive and finite.

    Examples
    --------
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=4, n_heads=2, d_ff=8)
    >>> detect_architecture(open_checkpoint(sd, config=cfg)).head_dim
    2
    """
    L = check_scalar(n_layers, "n_layers", int, min_val=1)
    N = check_scalar(hidden, "hidden (hidden size)", int, min_val=1)
    H = check_scalar(n_heads, "n_heads", int, min_val=1)
    F = check_scalar(d_ff, "d_ff (feed-forward width)", int, min_val=1)
    std = check_scalar(std, "std", float, min_val=0, include_boundaries="neither")
    if N % H:
        raise ValueError(f"n_heads = {H} does not divide hidden = {N}")
    rng = np.random.default_rng(check_scalar(seed, "seed", int, min_val=0))
    _, roles = _ROLES["bert"]
    shapes = {"q": (N, N), "k": (N, N), "v": (N, N), "o": (N, N), "f_in": (F, N), "f_out": (N, F)}
    state_dict = {f"encoder.layer.{layer}.{roles[r]}": std * rng.standard_normal(shapes[r])
                  for layer in range(L) for r in ("q", "k", "v", "o", "f_in", "f_out")}
    config = {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
              "intermediate_size": F, "hidden_act": "gelu"}
    return state_dict, config


# --------------------------------------------------------------------------------------------
# Per-layer matrices
# --------------------------------------------------------------------------------------------


#: The work units of a layer that is not a mixture of experts, in the order their results are listed:
#: the attention projections (``W_Q, W_K, W_V, W_O``: every head's ``QK_h`` and ``Ṽ_h``), the
#: feed-forward input map ``M_in`` and the output map ``M_out``. A part is a string, or a tuple whose
#: first entry is one of these strings and whose further entries say which copy (an expert index:
#: ``("M_in", e)``), so that parts stay hashable and picklable.
LAYER_PARTS = ("attention", "M_in", "M_out")


def part_kind(part) -> str:
    """``"attention"``, ``"M_in"`` or ``"M_out"``: what a part identifier (``"M_in"``, ``("M_in", e)``) holds."""
    kind = part[0] if isinstance(part, tuple) and part else part
    if kind not in LAYER_PARTS:
        raise ValueError(f"unknown layer part {part!r}; a part is one of {LAYER_PARTS} (or a tuple starting "
                         "with one)")
    return kind


def layer_parts(spec: "ArchitectureSpec", layer: int) -> tuple:
    """The work units of ``layer``, in the order :func:`bounds_lib.analysis.spectra.layer_spectra` lists their results.

    Each unit is read (:func:`iter_layers` with ``parts=``) and decomposed on its own, so a worker
    holds only the tensors of the unit it factors. A dense layer has the three parts of
    :data:`LAYER_PARTS`; a mixture-of-experts layer (Mixtral) has ``"attention"`` and then every
    expert's ``("M_in", e)`` and ``("M_out", e)``, expert by expert.
    """
    if not 0 <= layer < spec.n_layers:
        raise ValueError(f"layer {layer} out of range 0..{spec.n_layers - 1}")
    if spec.n_experts:
        return ("attention",) + tuple((kind, e) for e in range(spec.n_experts) for kind in ("M_in", "M_out"))
    return LAYER_PARTS


def part_expert(part) -> int | None:
    """The expert a part belongs to (``("M_in", 3)`` → 3), ``None`` for the attention and a dense part."""
    return part[1] if isinstance(part, tuple) and len(part) > 1 else None


def part_roles(spec: "ArchitectureSpec", part) -> tuple:
    """The roles (keys of :meth:`ArchitectureSpec.tensor_names`) of the stored tensors a part reads."""
    kind = part_kind(part)
    if kind == "attention":
        return ("qkv", "o") if spec.family in _FUSED_QKV else ("q", "k", "v", "o")
    if spec.n_experts:
        e = part_expert(part)
        return (f"gate.{e}", f"up.{e}") if kind == "M_in" else (f"down.{e}",)
    if kind == "M_in":
        return ("gate_up",) if spec.family == "phi3" else ("gate", "up") if spec.gated_ffn else ("f_in",)
    return ("down",) if spec.gated_ffn else ("f_out",)


def part_tensor_names(spec: "ArchitectureSpec", layer: int, part) -> dict:
    """``{role: full tensor name}`` of the tensors ``part`` of ``layer`` reads (a subset of ``tensor_names``)."""
    names = spec.tensor_names(layer)
    return {role: names[role] for role in part_roles(spec, part)}


@dataclass(frozen=True)
class LayerWeights:
    """One layer's weights in the row-vector convention (``X ↦ X W``), or those of some of its parts.

    ``Wq`` (N×H·d_h), ``Wk``, ``Wv`` (N×H_kv·d_h), ``Wo`` (H·d_h×N), ``M_in`` (N×d_ff, or N×2d_ff for a
    gated feed-forward), ``M_out`` (d_ff×N). For ``nn.Linear`` layouts these are transposed *views* of
    the stored ``(out, in)`` arrays, so ``Wq[:, hs] @ Wk[:, hs].T`` is literally the released
    ``q[hs,:]ᵀ k[hs,:]``. ``parts`` lists the parts read (:func:`layer_parts`); the fields of a part
    not read are ``None``. A mixture-of-experts layer keeps ``M_in``/``M_out`` ``None`` and holds every
    expert's matrices in ``expert_matrices`` (``{("M_in", e): N×2d_ff, ("M_out", e): d_ff×N}``), read
    through :meth:`matrix`.
    """

    layer: int
    spec: ArchitectureSpec
    Wq: np.ndarray | None
    Wk: np.ndarray | None
    Wv: np.ndarray | None
    Wo: np.ndarray | None
    M_in: np.ndarray | None
    M_out: np.ndarray | None
    names: dict = field(default_factory=dict, compare=False)
    parts: tuple = field(default=None, compare=False)
    expert_matrices: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.parts is None:  # built by hand with arrays: the parts whose fields are present
            present = {"attention": self.Wq is not None, "M_in": self.M_in is not None,
                       "M_out": self.M_out is not None}
            object.__setattr__(self, "parts", tuple(p for p in LAYER_PARTS if present[p])
                               + tuple(p for p in layer_parts(self.spec, self.layer) if p in self.expert_matrices))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the arrays held (that of the first part read)."""
        for W in (self.Wq, self.Wv, self.M_in, self.M_out, *self.expert_matrices.values()):
            if W is not None:
                return W.dtype
        raise ValueError(f"layer {self.layer}: no weights were read")

    def matrix(self, part) -> np.ndarray:
        """The dense feed-forward matrix of a part (``M_in``, ``M_out``, or an expert's ``("M_in", e)``…);
        ``ValueError`` if it was not read."""
        kind = part_kind(part)
        if part_expert(part) is not None:
            W = self.expert_matrices.get((kind, part_expert(part)))
        else:
            W = self.M_in if kind == "M_in" else self.M_out if kind == "M_out" else None
        if W is None:
            raise ValueError(f"layer {self.layer}: part {part!r} is not a dense matrix that was read")
        return W

    def _attention(self, W):
        if W is None:
            raise ValueError(f"layer {self.layer}: the attention projections were not read (parts={self.parts})")

    def _cols(self, h):
        d = self.spec.head_dim
        return slice(h * d, (h + 1) * d)

    def W_Q(self, h: int) -> np.ndarray:
        """``W_{Q,h}`` (N×d_h)."""
        self._attention(self.Wq)
        return self.Wq[:, self._cols(h)]

    def W_K(self, h: int) -> np.ndarray:
        """``W_{K,h}`` (N×d_h) — the key group of query head ``h``."""
        self._attention(self.Wk)
        return self.Wk[:, self._cols(self.spec.kv_group(h))]

    def W_V(self, h: int) -> np.ndarray:
        """``W_{V,h}`` (N×d_h) — the value group of query head ``h``."""
        self._attention(self.Wv)
        return self.Wv[:, self._cols(self.spec.kv_group(h))]

    def W_O(self, h: int) -> np.ndarray:
        """``W_{O,h}`` (d_h×N) — the rows of the output projection that read head ``h``."""
        self._attention(self.Wo)
        return self.Wo[self._cols(h), :]

    def QK(self, h: int) -> np.ndarray:
        """Explicit ``QK_h = W_{Q,h} W_{K,h}ᵀ`` (N×N); logits of head ``h`` are ``X QK_h Xᵀ``."""
        return self.W_Q(h) @ self.W_K(h).T

    def V_tilde(self, h: int) -> np.ndarray:
        """Explicit ``Ṽ_h = W_{V,h} W_{O,h}`` (N×N)."""
        return self.W_V(h) @ self.W_O(h)


def iter_layers(source: TensorSource, spec: ArchitectureSpec | None = None, *, dtype=np.float64,
                layers=None, parts=None) -> Iterator[LayerWeights]:
    """Yield :class:`LayerWeights` one layer at a time (only that layer's tensors are in memory).

    ``parts`` (default: all of :func:`layer_parts`) reads only the tensors of those parts; the other
    fields are ``None``. The generator keeps no reference to a layer it has yielded, so once the
    caller drops it the next layer is read into free memory, not next to it.
    """
    spec = spec or detect_architecture(source)
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    idx = range(spec.n_layers) if layers is None else layers
    for layer in idx:
        if not 0 <= layer < spec.n_layers:
            raise ValueError(f"layer {layer} out of range 0..{spec.n_layers - 1}")
        yield _read_layer(source, spec, layer, dtype, layer_parts(spec, layer) if parts is None else parts)


def _read_layer(source: TensorSource, spec: ArchitectureSpec, layer: int, dtype,
                parts=LAYER_PARTS) -> LayerWeights:
    """The tensors of ``parts`` of ``layer`` (in the order of :func:`layer_parts`), each read once."""
    known = layer_parts(spec, layer)
    unknown = [p for p in parts if p not in known]
    if unknown or not parts:
        raise ValueError(f"layer {layer}: parts must be a non-empty selection of {known}, got {tuple(parts)!r}")
    parts = tuple(p for p in known if p in parts)
    names = spec.tensor_names(layer)
    Wq = Wk = Wv = Wo = M_in = M_out = None
    experts = {}
    for part in parts:
        if part == "attention":
            Wq, Wk, Wv, Wo = _read_attention(source, spec, names, dtype)
            continue
        W = _read_ffn(source, spec, [names[r] for r in part_roles(spec, part)], dtype)
        if part_expert(part) is not None:
            experts[part] = W
        elif part == "M_in":
            M_in = W
        else:
            M_out = W
    read = {role: names[role] for p in parts for role in part_roles(spec, p)}
    return LayerWeights(layer, spec, Wq, Wk, Wv, Wo, M_in, M_out, read, parts, experts)


def _read_attention(source: TensorSource, spec: ArchitectureSpec, names: dict, dtype) -> tuple:
    """``(Wq, Wk, Wv, Wo)`` in the row-vector convention, head-major columns, from the stored tensors.

    * GPT-2 ``c_attn`` (Conv1D, ``(in, out)``): columns ``[Q | K | V]``.
    * Phi-3 ``qkv_proj`` (``nn.Linear``, ``(out, in)``): rows ``[Q (H·d_h) | K (H_kv·d_h) | V (H_kv·d_h)]``,
      as ``Phi3Attention`` slices its output.
    * GPT-NeoX ``query_key_value``: rows interleaved per head, ``[q_0 k_0 v_0 | q_1 k_1 v_1 | …]`` (each
      d_h rows) — ``GPTNeoXAttention`` views its output as ``(…, H, 3·d_h)`` and chunks the last axis in
      three — so head ``h``'s query rows are ``3·h·d_h … 3·h·d_h + d_h``.
    * Separate projections (``nn.Linear``): the transposed views of ``q``, ``k``, ``v``, ``o``.
    """
    N, H, Hk, d = spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim
    if spec.family == "gpt2":
        qkv = source.read(names["qkv"], dtype)
        return qkv[:, :N], qkv[:, N:2 * N], qkv[:, 2 * N:], source.read(names["o"], dtype)
    if spec.family == "phi3":
        qkv = source.read(names["qkv"], dtype)
        q_end, k_end = H * d, (H + Hk) * d
        return qkv[:q_end].T, qkv[q_end:k_end].T, qkv[k_end:].T, source.read(names["o"], dtype).T
    if spec.family == "gpt_neox":
        per_head = source.read(names["qkv"], dtype).reshape(H, 3, d, -1)  # (head, q/k/v, row, in)
        Wq, Wk, Wv = (np.ascontiguousarray(per_head[:, j].reshape(H * d, -1).T) for j in range(3))
        del per_head
        return Wq, Wk, Wv, source.read(names["o"], dtype).T
    return tuple(source.read(names[r], dtype).T for r in ("q", "k", "v", "o"))


def _read_ffn(source: TensorSource, spec: ArchitectureSpec, tensor_names: list, dtype) -> np.ndarray:
    """``M_in`` (N×d_ff, or ``[G | U]`` N×2d_ff when gated) or ``M_out`` (d_ff×N) from its stored tensors.

    A gated ``M_in`` stored as two tensors (gate, up) is filled one half at a time, so they are never
    held next to it; Phi-3's fused ``gate_up_proj`` has rows ``[gate | up]`` (``Phi3MLP`` chunks its
    output in two), so its transpose is ``[G | U]`` already. GPT-2's Conv1D stores ``(in, out)``.
    """
    if len(tensor_names) == 2:  # gate and up, separately
        N, F = spec.hidden, spec.d_ff
        M_in = np.empty((N, 2 * F), dtype=dtype)
        for j, name in enumerate(tensor_names):
            M_in[:, j * F:(j + 1) * F] = source.read(name, dtype).T
        return M_in
    W = source.read(tensor_names[0], dtype)
    return W if spec.family == "gpt2" else W.T
