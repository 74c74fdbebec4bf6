"""Opening a model (Chapter 6): a model folder, a Hugging Face Hub id, a torch module or a state dict.

:func:`open_checkpoint` turns any of these into a :class:`~bounds_lib.checkpoints.formats.TensorSource`.
A model folder's weights are chosen as transformers' ``from_pretrained`` chooses them
(:func:`weight_files`, :data:`WEIGHT_FILES`); a shard index is followed exactly (each tensor in the one
shard it names, no shard path leaving the folder); a symbolic link that cannot be followed is named as
such. A Hub id is resolved through the local cache, downloading only when the user allows it and is
online (:func:`resolve_hub_id`); the download has a deadline, and so has every request.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import threading
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Mapping

from ..core.validation import check_scalar
from .formats import CheckpointError, SafetensorsSource, StateDictSource, TensorSource, TorchBinSource, loads_json

#: Environment switch that allows downloads of Hub ids missing from the local cache.
ALLOW_DOWNLOAD_ENV = "BOUNDS_LIB_ALLOW_DOWNLOAD"

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
    """``fn()`` in a daemon thread; :class:`~bounds_lib.checkpoints.formats.CheckpointError` if it has not returned
    after ``deadline`` s.

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
    ``HF_HUB_OFFLINE`` is not set; otherwise a missing model is a
    :class:`~bounds_lib.checkpoints.formats.CheckpointError`.
    Every request waits at most ``REQUEST_TIMEOUT_S`` for the server (``_requests_time_out``), and
    the whole download at most ``download_timeout`` seconds (default ``DOWNLOAD_TIMEOUT_S``, at most
    ``MAX_DOWNLOAD_TIMEOUT_S``); then a :class:`~bounds_lib.checkpoints.formats.CheckpointError`.
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
        msg = " ".join(str(exc).split()) or type(exc).__name__  # whole, on one line: never cut mid-sentence
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
    """Open ``model`` as a :class:`~bounds_lib.checkpoints.formats.TensorSource` (Chapter 6): nothing but the header
    and config is read.

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
        Tensors read one at a time (:meth:`~bounds_lib.checkpoints.formats.TensorSource.read`), with ``config``,
        ``description`` and
        ``storage`` (``"safetensors"``, ``"pytorch-bin"`` or ``"in-memory"``).

    Raises
    ------
    CheckpointError
        (a :class:`ValueError`) with one line naming the problem: no such directory, an empty
        argument, a file instead of a folder, a state dict without config, a Hub id not in the cache
        while downloads are off, a corrupted or truncated weight file, and so on.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=4, n_heads=2, d_ff=8)
    >>> src = open_checkpoint(sd, config=cfg)
    >>> src.storage, src.shape("encoder.layer.0.attention.self.query.weight")
    ('in-memory', (4, 4))
    >>> open_checkpoint("./no/such/model")
    Traceback (most recent call last):
        ...
    bounds_lib.checkpoints.formats.CheckpointError: ./no/such/model: no such model directory
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
        if path.is_file() and path.suffix.lower() == ".onnx":
            from .onnx_graph import open_onnx

            return open_onnx(path, config)
        if path.is_file():
            raise CheckpointError(f"{path}: is a file; pass the model directory that holds config.json and "
                                  "the weights, or an ONNX export (.onnx)")
        return _open_directory(path)
    reason = _broken_link(path)
    if reason:
        raise CheckpointError(f"{path}: the model folder {reason}")
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep in text.replace("/", "")
    if looks_like_path or not _HUB_ID.fullmatch(text):
        raise CheckpointError(f"{text}: no such model directory")
    snapshot = resolve_hub_id(text, allow_download=allow_download, download_timeout=download_timeout)
    return _open_directory(snapshot, description=f"{text} (Hub cache: {snapshot})")
