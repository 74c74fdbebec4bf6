"""Results files and model checkpoints of the trained-model grids (Chapters 7–8).

A grid run (:mod:`bounds_lib.studies.grid`, ``python -m bounds_lib.studies.grid``) writes one JSON *results
file*: ``{"metadata": {...}, "rows": [...]}``. Each row holds the training configuration, the measured
train/test loss and 0-1 error with the gap ``test − train``, and the proxies of
:func:`bounds_lib.analysis.single_head.single_head_proxies` computed on the trained weights (all as ``log10``).
Every file carries ``metadata["schema"]`` (:data:`RESULTS_SCHEMA`) and ``n_rows``;
:func:`read_results` refuses another version, a truncated, partial or corrupted file.

The committed results files live in ``bounds_lib/data`` (package data, :data:`RESULTS_FILES`);
chapters read them only through :func:`load_results`. The trained weights of a grid can be kept as
one-head BERT-layout checkpoints (:func:`save_model`, :func:`load_model`), which the checkpoint reader
of Chapter 6 (:mod:`bounds_lib.checkpoints`) reads like any other model.

Row accessors: :func:`proxy_value` (a proxy's ``log10``), :func:`variant_name` (the training choice
of a Chapter 8 row), :func:`unpack_correct` (its per-example test results).
"""
from __future__ import annotations

import json
import math

import numpy as np

from ..theory.model import Block, SingleHeadTransformer
from ..theory.model import SINGLE_HEAD_MATRIX_TYPES
from ..analysis.single_head import PROXY_NAMES
from ..core.validation import DuplicateKeyError, no_duplicate_keys

__all__ = [
    "RESULTS_SCHEMA",
    "GRID_COMMAND",
    "RESULTS_FILES",
    "ResultsError",
    "check_results",
    "read_results",
    "merge_results",
    "reused_rows",
    "load_results",
    "proxy_value",
    "rerun_command",
    "variant_name",
    "unpack_correct",
    "save_model",
    "load_model",
]

#: The format tag every results file carries in ``metadata["schema"]``; :func:`check_results` refuses
#: a file without it or with another one.
RESULTS_SCHEMA = "bounds_lib.trained-results/1"
#: The command that writes results files, as their ``metadata["command"]`` records it.
GRID_COMMAND = "python -m bounds_lib.studies.grid"
# Earlier spellings of GRID_COMMAND in committed files' metadata (the same program, under the module
# paths it had before the library's subpackages: ``bounds_lib.experiments``, then ``bounds_lib.grid``).
_EARLIER_COMMANDS = ("python -m bounds_lib.experiments", "python -m bounds_lib.grid")


# ----------------------------------------------------------------------------- reading and checking results

class ResultsError(ValueError):
    """A results file that is not a complete results file of this library's format."""


#: The largest results file :func:`read_results` reads (the committed ones are below 2 MB).
MAX_RESULTS_BYTES = 256 * 2**20


_ROW_KEYS = ("config", "train_error", "test_error", "gap_error", "gap_loss", "proxies", "seconds")


def check_results(data, source: str = "results") -> dict:
    """Check that ``data`` is a complete results file of format :data:`RESULTS_SCHEMA`; return it.

    Refused with :class:`ResultsError` (one line saying what is wrong and what is supported): a file
    without ``metadata["schema"]`` or with another one (another version of this library), a
    ``partial`` file, rows missing a measured quantity or a proxy, non-finite numbers, or fewer rows than
    ``metadata["n_rows"]`` says — a chapter never plots a truncated grid.

    Raises
    ------
    ResultsError
        (a :class:`ValueError`) for any of the above.

    Examples
    --------
    >>> check_results({"metadata": {"schema": "bounds_lib.trained-results/0"}, "rows": []},
    ...               "old.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    bounds_lib.studies.results.ResultsError: old.json: results schema 'bounds_lib.trained-results/0' is not ...
    """
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict) or not isinstance(
            data.get("rows"), list):
        raise ResultsError(f"{source}: not a results file (expected a JSON object with 'metadata' and 'rows')")
    schema = data["metadata"].get("schema")
    if schema != RESULTS_SCHEMA:
        raise ResultsError(f"{source}: results schema {schema!r} is not supported (this library reads "
                           f"{RESULTS_SCHEMA!r}); regenerate the file with the command in its metadata")
    if data["metadata"].get("partial"):
        raise ResultsError(f"{source}: a partial results file (an interrupted grid); finish it by rerunning "
                           f"its command, which resumes")
    rows = data["rows"]
    if not rows:
        raise ResultsError(f"{source}: the file holds no rows")
    expected = data["metadata"].get("n_rows")
    if expected != len(rows):
        raise ResultsError(f"{source}: metadata says n_rows = {expected!r} but the file holds {len(rows)} rows "
                           f"(truncated or edited)")
    for i, r in enumerate(rows):
        missing = [k for k in _ROW_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise ResultsError(f"{source}: row {i} lacks {', '.join(missing)}")
        missing = [k for k in PROXY_NAMES if k not in r["proxies"]]
        if missing:
            raise ResultsError(f"{source}: row {i} lacks the proxies {', '.join(missing)}")
        vals = [r[k] for k in _ROW_KEYS[1:4]] + [r["proxies"][k] for k in PROXY_NAMES]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            raise ResultsError(f"{source}: row {i} holds a non-finite or non-numeric measurement")
    return data


def read_results(path, allow_partial: bool = False) -> dict:
    """Read and check a results file (``.json``; with ``allow_partial`` also ``.partial.jsonl`` progress).

    A progress file (one row per line, written while a grid runs) is accepted only for ``--reuse``.

    Raises
    ------
    ResultsError
        The file cannot be read, is not valid JSON, is a progress file (without ``allow_partial``), or
        fails :func:`check_results`.
    """
    import pathlib

    path = pathlib.Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RESULTS_BYTES:
            raise ResultsError(f"{path}: {size} bytes, more than a results file holds (at most "
                               f"{MAX_RESULTS_BYTES} bytes; the committed ones are below 2 MB)")
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise ResultsError(f"{path}: cannot read the results file ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: corrupted results file, not UTF-8 text") from None
    if path.name.endswith(".jsonl"):
        if not allow_partial:
            raise ResultsError(f"{path}: a progress file of an unfinished grid, not a results file")
        return _read_progress(path, text)
    try:
        data = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: corrupted results file, not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise ResultsError(f"{path}: corrupted results file, nested too deeply to be a results file") from None
    except DuplicateKeyError as e:
        raise ResultsError(f"{path}: corrupted results file, an object names {e.args[0]!r} twice") from None
    return check_results(data, str(path))


def _read_progress(path, text: str) -> dict:
    """The rows of a progress file, one JSON line each. Its last line may be half written (the process was
    killed while appending it: no newline after it): that row is left out and named in the metadata
    (``"half_line_dropped"``: its characters), so the grid trains it again. Any other line that is not
    JSON is a corrupted file."""
    lines = text.split("\n")
    tail = lines.pop()  # what follows the last newline: "" when the last row was written whole
    rows = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ResultsError(f"{path}: corrupted progress file (line {i}: {e.msg})") from None
    meta = {"schema": RESULTS_SCHEMA, "partial": True}
    if tail.strip():
        try:
            rows.append(json.loads(tail))  # written whole, killed before its newline
        except json.JSONDecodeError:
            meta["half_line_dropped"] = len(tail)
    return {"metadata": meta, "rows": rows}


def reused_rows(paths, progress) -> dict:
    """The rows of ``--reuse`` files and of this command's progress file (an interrupted run). A progress
    file whose last line was half written when the process was killed is cut back to its whole lines (the
    next row is appended after them), and the row of the half line is trained again."""
    import pathlib

    rows = []
    for path in paths:
        rows += read_results(path, allow_partial=True)["rows"]
    progress = pathlib.Path(progress)
    if progress.is_file():
        part = read_results(progress, allow_partial=True)
        rows += part["rows"]
        if not progress.read_bytes().endswith(b"\n"):  # the last row, whole or half, has no newline
            tmp = progress.with_name(progress.name + ".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in part["rows"]))
            tmp.replace(progress)
    return {"rows": rows}


def merge_results(paths, argv=()) -> dict:
    """Concatenate the rows of several complete results files (e.g. parts of one grid run by separate
    ``--select`` commands); ``metadata["commands"]`` lists the parts' commands, costs are summed.

    Raises :class:`ResultsError` if a part is not a complete results file (:func:`read_results`).
    """
    parts = [read_results(p) for p in paths]
    rows = [r for d in parts for r in d["rows"]]
    meta = dict(parts[0]["metadata"])
    meta.pop("select", None)
    meta.update(command=f"{GRID_COMMAND} " + " ".join(argv), n_rows=len(rows),
                commands=[d["metadata"]["command"] for d in parts],
                reused_rows=sum(d["metadata"].get("reused_rows", 0) for d in parts),
                total_seconds=sum(d["metadata"]["total_seconds"] for d in parts),
                training_seconds_sum=float(sum(r["seconds"] for r in rows)),
                notes=[d["metadata"].get("note") for d in parts])
    if all("stop_loss" in d["metadata"] for d in parts):
        meta.update(wall_seconds=sum(d["metadata"]["wall_seconds"] for d in parts),
                    n_reached=sum(bool(r["reached_target"]) for r in rows),
                    n_not_reached=sum(not r["reached_target"] for r in rows),
                    steps_taken=[r["steps_taken"] for r in rows])
    meta.pop("note", None)
    return check_results({"metadata": meta, "rows": rows}, "merged results")


#: The results files shipped with the library (package data in ``bounds_lib/data``).
RESULTS_FILES = {"trained_grid": "trained_grid.json", "common_loss": "trained_common_loss.json",
                 "common_loss_rand256": "trained_common_loss_rand256.json", "study": "spectrum_study.json",
                 "robust": "study_robust.json", "replication": "study_replication.json",
                 "digits": "study_digits.json", "replication_6000": "study_replication_6000.json"}


def load_results(name: str) -> dict:
    """A committed results file by name (:data:`RESULTS_FILES`), read from the installed package and checked.

    Chapters 7 and 8 read their data only through this function, never through a path relative to the
    repository, so they run the same from a wheel.

    Parameters
    ----------
    name : str
        One of ``"trained_grid"`` (Chapter 7's fixed-step grid), ``"common_loss"`` and
        ``"common_loss_rand256"`` (trained to a common loss), ``"study"`` (Chapter 8), ``"robust"``
        (Chapter 9's pre-registered study on the planted teacher).

    Returns
    -------
    dict
        ``{"metadata": {...}, "rows": [...]}``, checked by :func:`check_results`.

    Raises
    ------
    TypeError
        ``name`` is not a string.
    ValueError
        ``name`` is not a committed results file.
    ResultsError
        The file is of another format version, truncated, partial or corrupted.

    Examples
    --------
    >>> grid = load_results("trained_grid")
    >>> grid["metadata"]["schema"] == RESULTS_SCHEMA, grid["metadata"]["n_rows"] == len(grid["rows"])
    (True, True)
    >>> sorted(grid["rows"][0]["proxies"])[:3]
    ['B_11', 'B_edelman', 'B_ours_rss']
    """
    from importlib import resources

    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}; available: {', '.join(RESULTS_FILES)}")
    if name not in RESULTS_FILES:
        raise ValueError(f"unknown results {name!r}; available: {', '.join(RESULTS_FILES)}")
    res = resources.files("bounds_lib") / "data" / RESULTS_FILES[name]
    with resources.as_file(res) as path:
        return read_results(path)


# ----------------------------------------------------------------------------- reading rows


def proxy_value(row: dict, name: str) -> float:
    """``log10`` of proxy ``name`` in a results row (``"mean_p_star"``, the mean ``p*``, is a plain value).

    Besides :data:`~bounds_lib.analysis.single_head.PROXY_NAMES`, ``"readout_norm"`` gives ``log10 ‖w‖₂`` of the
    [CLS] readout, and ``"train_error"`` / ``"steps_taken"`` the row's measures of fit (baselines,
    plain values).

    Raises
    ------
    KeyError
        The row stores no proxy ``name``.

    Examples
    --------
    >>> row = {"proxies": {"B_ours_sum": 2.5, "readout_norm": 100.0,
    ...                    "p_star": {"QK": [0.0], "V": [1.0], "M": [2.0]}}}
    >>> proxy_value(row, "B_ours_sum"), proxy_value(row, "readout_norm"), proxy_value(row, "mean_p_star")
    (2.5, 2.0, 1.0)
    """
    if name == "mean_p_star":
        return float(np.mean([p for a in SINGLE_HEAD_MATRIX_TYPES for p in row["proxies"]["p_star"][a]]))
    if name == "readout_norm":
        return math.log10(row["proxies"]["readout_norm"])
    if name in ("train_error", "steps_taken"):  # baseline measures of fit (Chapter 7), plain values
        return float(row[name])
    if name not in row["proxies"]:
        raise KeyError(f"row has no proxy {name!r}; available: {', '.join(PROXY_NAMES)}")
    return float(row["proxies"][name])


def rerun_command(metadata: dict, width: int = 78) -> str:
    """The command that regenerates a results file, as a reader types it today, wrapped at ``width``.

    A results file records the command it was made by (``metadata["command"]``, the module and its
    arguments as given). Returned: that command without its ``--note`` (free text about the run,
    which the file keeps), with an earlier spelling of the module (``python -m
    bounds_lib.experiments``) written as :data:`GRID_COMMAND`, and with shell line continuations
    (``\\``) between options so that no line is longer than ``width`` characters (a single
    argument longer than that stays on its own line). The chapters show it in a code block.

    Raises
    ------
    ValueError
        The metadata records no command, or ``width`` is below 20.

    Examples
    --------
    >>> meta = {"command": "python -m bounds_lib.experiments --out x.json --preset study --note one run"}
    >>> print(rerun_command(meta))
    python -m bounds_lib.studies.grid --out x.json --preset study
    >>> print(rerun_command(meta, width=36))
    python -m bounds_lib.studies.grid \\
        --out x.json --preset study
    """
    command = metadata.get("command") if isinstance(metadata, dict) else None
    if not isinstance(command, str) or not command.strip():
        raise ValueError("the metadata records no command (metadata['command'], which bounds_lib.studies.grid "
                         "writes into every results file)")
    if isinstance(width, bool) or not isinstance(width, int) or width < 20:
        raise ValueError(f"width must be an integer of at least 20 characters, not {width!r}")
    command = command.split(" --note", 1)[0].strip()
    for old in _EARLIER_COMMANDS:
        if command == old or command.startswith(old + " "):
            command = GRID_COMMAND + command[len(old):]
    head = GRID_COMMAND if command.startswith(GRID_COMMAND + " ") else command.split()[0]
    units: list[list[str]] = []  # an option with the values that follow it
    for token in command[len(head):].split():
        if token.startswith("--") or not units:
            units.append([token])
        else:
            units[-1].append(token)
    indent, lines, line = "    ", [], head
    for unit in units:
        pieces = [" ".join(unit)]
        if len(indent + pieces[0]) > width - 2:  # an option with many values: one value a line
            pieces = [" ".join(unit[:2])] + unit[2:]
        for piece in pieces:
            if len(line) + 1 + len(piece) <= width - 2:
                line += " " + piece
            else:
                lines.append(line + " \\")
                line = indent + piece
    return "\n".join(lines + [line])


def variant_name(config: dict) -> str:
    """``"plain"``, ``"weight_decay=1"``, ``"nuclear=0.001"`` or ``"rank=2"``: the training choice of a row.

    >>> variant_name({"L": 2, "nuclear": 0.001}), variant_name({"L": 2})
    ('nuclear=0.001', 'plain')
    """
    for k in ("weight_decay", "nuclear", "rank"):
        if config.get(k):
            return f"{k}={config[k]:g}"
    return "plain"


def unpack_correct(row: dict) -> np.ndarray:
    """Per test example of a Chapter 8 row: True if the model classified it correctly.

    Raises
    ------
    KeyError
        The row stores no per-example results (only the rows of the Chapter 8 study do).

    Examples
    --------
    >>> row = load_results("study")["rows"][0]
    >>> ok = unpack_correct(row)
    >>> ok.shape == (row["config"]["n_test"],), bool(ok.mean() == 1 - row["test_error"])
    (True, True)
    """
    if "test_correct_hex" not in row:
        raise KeyError("this row stores no per-example test results (only the rows of the Chapter 8 study do)")
    n = row["config"]["n_test"]
    return np.unpackbits(np.frombuffer(bytes.fromhex(row["test_correct_hex"]), dtype=np.uint8))[:n].astype(bool)


# ----------------------------------------------------------------------------- single-head weights as checkpoints


def save_model(model: SingleHeadTransformer, directory, meta: dict | None = None) -> None:
    """Save a single-head model as a one-head BERT-layout checkpoint that ``bounds_lib.checkpoints`` reads.

    ``directory`` receives ``config.json`` (``model_type = "bert"``, one head of dimension ``N``,
    ``intermediate_size = N``) and ``model.safetensors`` (float64) with, in ``nn.Linear``'s
    ``(out, in)`` storage, ``query = W_QKᵀ``, ``key = I``, ``value = W_Vᵀ``, ``output = I``,
    ``intermediate = I`` and ``output.dense = W_Mᵀ``, so that the checkpoint reader's
    ``QK = W_Q W_Kᵀ = W_QK``, ``Ṽ = W_V W_O = W_V`` and ``M_in M_out = W_M`` exactly (products with the
    identity are exact in floating point). The readout ``w`` is ``classifier.weight`` (1×N); the
    activation, logit scale and ``meta`` go to ``config.json["bounds_lib"]``.

    Examples
    --------
    >>> import tempfile
    >>> from bounds_lib.theory.model import random_transformer
    >>> net = random_transformer(2, 4, np.random.default_rng(0))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_model(net, d)
    ...     back = load_model(d)
    >>> all(np.array_equal(a.W_M, b.W_M) for a, b in zip(net.blocks, back.blocks))
    True
    """
    import pathlib

    from safetensors.numpy import save_file

    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    L, N = model.L, model.N
    eye = np.eye(N)
    tensors = {}
    for l, b in enumerate(model.blocks):
        pre = f"bert.encoder.layer.{l}."
        tensors[pre + "attention.self.query.weight"] = np.ascontiguousarray(b.W_QK.T)
        tensors[pre + "attention.self.key.weight"] = eye.copy()
        tensors[pre + "attention.self.value.weight"] = np.ascontiguousarray(b.W_V.T)
        tensors[pre + "attention.output.dense.weight"] = eye.copy()
        tensors[pre + "intermediate.dense.weight"] = eye.copy()
        tensors[pre + "output.dense.weight"] = np.ascontiguousarray(b.W_M.T)
    tensors["classifier.weight"] = np.ascontiguousarray(model.w[None, :])
    hidden_act = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "identity": "linear"}[model.act]
    config = {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": 1,
              "intermediate_size": N, "hidden_act": hidden_act,
              "bounds_lib": {"format": "single_head.v1", "act": model.act,
                             "logit_scale": model.logit_scale, **(meta or {})}}
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def load_model(directory) -> SingleHeadTransformer:
    """Read a single-head model through the library's checkpoint path (``bounds_lib.checkpoints``).

    Works for any one-head BERT-layout checkpoint: ``W_QK = QK_{ℓ,0}``, ``W_V = Ṽ_{ℓ,0}`` and
    ``W_M = M_in M_out`` (which needs ``intermediate_size = hidden_size``). Written by :func:`save_model`.
    """
    from ..checkpoints import CheckpointError, detect_architecture, iter_layers, open_checkpoint

    src = open_checkpoint(directory)
    spec = detect_architecture(src)
    if spec.n_heads != 1 or spec.d_ff != spec.hidden:
        raise CheckpointError(f"{src.description}: a single-head model needs 1 head and intermediate_size = "
                              f"hidden_size, got {spec.n_heads} heads and d_ff = {spec.d_ff}")
    blocks = tuple(Block(lw.QK(0), lw.V_tilde(0), lw.M_in @ lw.M_out) for lw in iter_layers(src, spec))
    if "classifier.weight" not in src:
        raise CheckpointError(f"{src.description}: no 'classifier.weight' tensor (the [CLS] readout w)")
    w = src.read("classifier.weight").reshape(-1)
    info = src.config.get("bounds_lib", {})
    return SingleHeadTransformer(blocks, w, act=info.get("act", "gelu"),
                                 logit_scale=float(info.get("logit_scale", 1.0)), meta=info)
