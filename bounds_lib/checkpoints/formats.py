"""Weight files and tensor sources (Chapter 6): reading one tensor at a time, validated.

:class:`CheckpointError` (every failure of the checkpoint reader is one line of it); JSON that refuses
duplicate keys and absurd nesting (:func:`loads_json`); the safetensors header, checked against the
format library's own rules (:func:`read_safetensors_header`), with the library itself as a backstop;
and the :class:`TensorSource` classes — safetensors files (:class:`SafetensorsSource`), legacy PyTorch
``.bin`` files loaded weights-only (:class:`TorchBinSource`), and in-memory state dicts
(:class:`StateDictSource`). Which files a model folder holds and how a model argument is opened is
:mod:`bounds_lib.checkpoints.hub`.
"""
from __future__ import annotations

import json
import math
import re
import struct
import warnings
from pathlib import Path
from typing import Mapping

import numpy as np

from ..core.validation import DuplicateKeyError, as_real_array, check_scalar, no_duplicate_keys


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not match a supported layout (one-line message)."""


#: safetensors dtype names -> the NumPy dtype of their stored bytes (bf16 and fp8 as raw unsigned integers)
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
    if type(x) is int:  # what JSON gives for a count: the rule's answer without its checks (a header has thousands)
        return x >= 0
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
            # pass); only a non-finite sum (huge weights, or a bad entry) needs the full check. A float64
            # widening holds the very values of the stored entries: it is summed without a cast.
            check = A if A.dtype == np.float64 else probe
            finite = np.isfinite(np.sum(check, dtype=np.float64)) or np.all(np.isfinite(check))
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
