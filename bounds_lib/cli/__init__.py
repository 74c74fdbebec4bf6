"""``bounds-lib`` — the paper's Section 6 analysis for any checkpoint, from the terminal (Chapter 6).

    bounds-lib analyze MODEL [--mode clean|paper] [--json F] [--csv F] [--plots DIR] ...
    bounds-lib scaling MODEL MODEL ... [--json F] [--csv F] [--plots DIR]

``MODEL`` is a local model directory or a Hugging Face Hub id resolved through the local cache
(downloads only with ``--allow-download`` or ``BOUNDS_LIB_ALLOW_DOWNLOAD=1``, never while
``HF_HUB_OFFLINE`` is set; a download waits at most ``--download-timeout`` seconds).

Outputs are all or nothing: every report and figure is computed completely and written to a
temporary file next to its destination, then all are renamed into place together, under a lock on
each destination folder (a second run writing there waits for the renames, up to a minute, so two
runs never leave a mixed set or roll back over each other); if anything fails (or the run is
interrupted by SIGINT, SIGTERM or SIGHUP, which are held off during the renames) the files of this
run are removed and replaced files restored, so the message "nothing was written" is true when
printed. Output paths are checked before any work (folder exists and is writable; no two outputs on
the same file; no output on a file the model is read from — its ``config.json``, its weights and
shards, a Hub snapshot's files). An existing report keeps its file mode; an output path that is a
symbolic link is written *through* (the file it points to is replaced, the link stays); ``-`` is
standard output (the table is then not printed), and an output that is not a regular file
(``/dev/null``, a FIFO, ``/dev/stdout``) is written through, never replaced; a socket or block
device is refused.
``--reproducible`` omits times and timings from the JSON report, so that two runs give identical
bytes. Errors print one line and exit with status 1 (``--debug`` shows the traceback); bad usage
exits with status 2; a stopping signal exits with 128 + its number; a closed pipe (``| head``) ends
the program quietly with status 141, as for Unix tools stopped by SIGPIPE.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as _dt
import errno
import fcntl
import io
import json
import math
import os
import platform
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

# The console script is the interface; the helpers below are internal (tests reach them by name).
__all__ = ["main"]

PROG = "bounds-lib"


def _progress_bar(label: str, enabled: bool):
    """A :mod:`tqdm` bar on stderr, driven by ``compute_spectra``'s ``progress(done, total)`` callback.

    Returns ``(callback, close)``; nothing is shown (and tqdm is not imported) when ``enabled`` is false.
    """
    if not enabled:
        return (lambda done, total: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(desc=label, total=None, file=sys.stderr, disable=not enabled, unit=" groups", leave=True)

    def callback(done: int, total: int):
        if bar.total != total:
            bar.reset(total=total)
        bar.update(done - bar.n)

    return callback, bar.close


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def _through_links(path) -> Path:
    """``path`` with symbolic links followed (a link is written through: its target is replaced)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


#: The output name that means standard output (``--json -``), as command-line tools read it.
STDOUT = "-"
#: Seconds a run waits for another run's final renames into the same folder (they take milliseconds).
LOCK_WAIT_S = 60.0
#: Signals that end a run cleanly (its outputs rolled back); held off while the final renames run.
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def _same_file_as_fd(st, fd: int) -> bool:
    try:
        return os.path.samestat(st, os.fstat(fd))
    except (OSError, ValueError):
        return False


def stream_target(path):
    """How an output that is not replaced by a rename is written, or ``None`` for a regular file.

    ``"stdout"`` for ``-`` or a path that is this process's standard output (``/dev/stdout`` into a
    pipe, say); ``"stderr"`` likewise; ``"through"`` for an existing character device (``/dev/null``)
    or FIFO, written through as ``open(path, "w")`` would. Raises :class:`_UserError` for any other
    existing file that is not a regular file (a block device, a socket): never replaced, never written.
    """
    if str(path) == STDOUT:
        return "stdout"
    try:
        st = os.stat(path)
    except OSError:
        return None  # a new file (a missing folder is reported by the output checks)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if not stat.S_ISDIR(st.st_mode) and _same_file_as_fd(st, fd):
            return name
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return "through"
    kind = "block device" if stat.S_ISBLK(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "special file"
    raise _UserError(f"{path}: is a {kind}, not a regular file; an output is a regular file, a character device "
                     "(/dev/null), a FIFO, or '-' (standard output)")


#: Signals held off (see :func:`_signals_held`): nesting depth and the first signal that came meanwhile.
_HOLD = {"depth": 0, "pending": None}


@contextlib.contextmanager
def _signals_held():
    """Hold off SIGINT, SIGTERM and SIGHUP while the block runs; one that came is raised at its end.

    Works with the handlers :func:`main` installs (:func:`_on_stop_signal`): a handler runs in the main
    thread whichever thread the kernel delivered the signal to, and while a block is held it only
    records the signal. (A per-thread signal mask would not do: BLAS and worker threads leave these
    signals unblocked, so the kernel delivers them there.)
    """
    _HOLD["depth"] += 1
    try:
        yield
    finally:
        _HOLD["depth"] -= 1
        if _HOLD["depth"] == 0 and _HOLD["pending"] is not None:
            signum, _HOLD["pending"] = _HOLD["pending"], None
            raise _Stopped(signum)


class _FolderLocks:
    """Exclusive ``flock`` locks on the folders an output set writes into (sorted: no deadlock).

    Two runs that write into the same folder commit one after the other, so neither sees the other's
    files half renamed, and a rollback never puts back files over another run's finished output.
    """

    def __init__(self, folders, wait_s: float):
        self._fds = []
        deadline = time.monotonic() + wait_s
        try:
            for folder in sorted({os.path.realpath(f) for f in folders}):
                fd = os.open(folder, os.O_RDONLY)
                self._fds.append(fd)
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise _UserError(f"another run has been writing its outputs into {folder} for more "
                                             f"than {wait_s:g} s; wait for it, or choose other output paths") from None
                        time.sleep(0.02)
        except BaseException:
            self.release()
            raise

    def release(self):
        for fd in self._fds:
            try:
                os.close(fd)  # closing the descriptor drops its lock
            except OSError:
                pass
        self._fds = []


class OutputSet:
    """Files one run writes, all or nothing.

    ``add()`` writes each file's content to a temporary file in the destination's folder (figures
    too, through ``add_file()``); ``commit()`` locks the destination folders against another run's
    commit, writes the outputs that are streams (``-``, ``/dev/null``, a FIFO: :func:`stream_target`),
    moves existing destinations aside, renames every temporary into place, and only then deletes the
    old files; SIGINT, SIGTERM and SIGHUP are held off during the renames. If anything fails or is
    interrupted before ``commit()`` returns, ``rollback()`` deletes what this run created
    (temporaries, new files, folders it made) and puts replaced files back. ``state`` is
    ``"nothing"`` (nothing of this run remains), ``"written"`` (all outputs in place) or
    ``"partial"`` (a rollback failed; ``problem`` says where).
    """

    def __init__(self, lock_wait_s: float | None = None):
        self._staged = []          # (tmp, destination)
        self._streams = []         # (target kind, path, data)
        self._dirs = []            # folders this run created (outermost first)
        self._done = []            # [destination, backup or None, moved aside] in commit order
        self._lock_wait_s = LOCK_WAIT_S if lock_wait_s is None else lock_wait_s
        self.state = "nothing"
        self.problem = ""

    def make_folder(self, folder):
        missing = []
        f = Path(folder)
        while not f.exists():
            missing.append(f)
            f = f.parent
        for d in reversed(missing):
            with _signals_held():  # made and recorded together: a signal cannot leave it unrecorded
                d.mkdir()
                self._dirs.append(d)

    def _tmp_for(self, dest: Path) -> Path:
        with _signals_held():  # created and recorded together (a stray .tmp otherwise)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
            os.close(fd)
            self._staged.append((Path(tmp), dest))
        return Path(tmp)

    def add(self, path, data: str | bytes):
        """Stage ``data`` for ``path`` (a stream output is kept in memory and written at commit)."""
        kind = stream_target(path)
        if kind is not None:
            self._streams.append((kind, path, data))
            return
        dest = _through_links(path)
        tmp = self._tmp_for(dest)
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(tmp, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def add_file(self, path, write):
        """Stage a file produced by ``write(tmp_path)`` (e.g. ``fig.savefig``) for ``path``."""
        dest = _through_links(path)
        write(self._tmp_for(dest))

    def _write_streams(self):
        for kind, path, data in self._streams:
            try:
                if kind in ("stdout", "stderr"):
                    f = sys.stdout if kind == "stdout" else sys.stderr
                    if isinstance(data, bytes):
                        f.flush()
                        f.buffer.write(data)
                    else:
                        f.write(data)
                    f.flush()
                else:
                    # a FIFO is opened without blocking first: with no reader that fails at once (ENXIO)
                    # instead of hanging the run; the writes then block as they would for `cat > fifo`
                    fifo = stat.S_ISFIFO(os.stat(path).st_mode)
                    fd = os.open(path, os.O_WRONLY | (os.O_NONBLOCK if fifo else 0))
                    if fifo:
                        os.set_blocking(fd, True)
                    with open(fd, "wb" if isinstance(data, bytes) else "w",
                              **({} if isinstance(data, bytes) else {"encoding": "utf-8", "newline": ""})) as f:
                        f.write(data)
            except BrokenPipeError:
                raise
            except OSError as exc:
                why = "no process reads the FIFO" if exc.errno == errno.ENXIO else exc.strerror or exc
                raise _UserError(f"cannot write {path} ({why}); no file of this run was written") from None

    def commit(self):
        umask = _umask()
        locks = _FolderLocks([dest.parent for _, dest in self._staged], self._lock_wait_s)
        try:
            self._write_streams()
            with _signals_held():
                try:
                    for tmp, dest in self._staged:
                        if dest.exists():
                            os.chmod(tmp, dest.stat().st_mode & 0o7777)  # keep the existing report's mode
                            fd, backup = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent)
                            os.close(fd)
                            rec = [dest, backup, False]      # [destination, backup, old file moved aside?]
                            self._done.append(rec)
                            os.replace(dest, backup)
                            rec[2] = True
                        else:
                            os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would create it
                            self._done.append([dest, None, False])
                        os.replace(tmp, dest)
                except BaseException:
                    self.rollback()
                    raise
                self._staged = []
                self.state = "written"
                for _, backup, _ in self._done:
                    if backup:
                        _unlink_quietly(backup)
                self._done = []
        finally:
            locks.release()  # a signal held off above is delivered here, after the set is complete

    def rollback(self):
        """Remove everything this run created and restore replaced files (nothing once written)."""
        if self.state == "written":
            return
        with _signals_held():
            self._rollback()

    def _rollback(self):
        problems = []
        staged = {dest for _, dest in self._staged}
        for dest, backup, moved in reversed(self._done):
            try:
                if backup and moved:
                    os.replace(backup, dest)
                elif backup:
                    os.unlink(backup)                # placeholder; the old file was never moved
                elif dest.exists() and dest in staged:
                    os.unlink(dest)
            except OSError as exc:
                problems.append(f"{dest}: {exc.strerror or exc}")
        self._done = []
        for tmp, _ in self._staged:
            _unlink_quietly(tmp)
        self._staged = []
        for d in reversed(self._dirs):
            try:
                d.rmdir()
            except OSError as exc:
                problems.append(f"{d}: {exc.strerror or exc}")
        self._dirs = []
        self.state = "partial" if problems else "nothing"
        self.problem = "; ".join(problems)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def run_metadata(args, extra=None) -> dict:
    """Library versions, BLAS threads, dtype, mode, command line and time of the run."""
    from importlib.metadata import PackageNotFoundError, version

    import numpy

    import bounds_lib

    try:
        scipy_version = version("scipy")  # without importing scipy (the analysis may not need it)
    except PackageNotFoundError:  # pragma: no cover - scipy is a dependency
        scipy_version = "?"
    versions = {"bounds_lib": bounds_lib.__version__, "numpy": numpy.__version__, "scipy": scipy_version,
                "python": platform.python_version()}
    for mod in ("torch", "transformers", "safetensors", "huggingface_hub"):
        if mod in sys.modules:
            versions[mod] = getattr(sys.modules[mod], "__version__", "?")
    blas = []
    try:
        from threadpoolctl import threadpool_info

        blas = [{"api": i.get("internal_api"), "threads": i.get("num_threads"), "version": i.get("version")}
                for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:  # pragma: no cover - threadpoolctl missing
        blas = [{"env_OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}]
    meta = {
        "command": [PROG] + list(getattr(args, "argv", [])),
        "platform": platform.platform(),
        "versions": versions,
        "blas": blas,
        "dtype": args.dtype,
        "mode": args.mode,
        "logit_scale": args.logit_scale,
        "entrywise_11_norms_of_heads": args.entrywise,
        "jobs": args.jobs,  # as asked (0: chosen by the library; meta.parallel says what it chose)
        "device": _device_used(args.device),
    }
    parallel = getattr(args, "parallel", None)
    if parallel:  # how the work was spread: backend, workers and why (memory, cores), resumed units
        meta["parallel"] = ({"backend": parallel.get("backend")} if getattr(args, "reproducible", False)
                            else parallel)
    if not getattr(args, "reproducible", False):
        meta["time_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    meta.update(extra or {})
    return meta


def _fmt(log_x: float) -> str:
    """A positive number given by its natural log: plain when moderate, ``10^x`` otherwise."""
    l10 = log_x / math.log(10)
    if -3 < l10 < 6:
        return f"{math.exp(log_x):.4g}"
    return f"10^{l10:.2f}"


def format_table(report) -> str:
    """Per-layer terminal table, a per-expert table for a mixture-of-experts model, the model-level proxies."""
    import numpy as np

    from ..theory.model import MULTI_HEAD_MATRIX_TYPES

    a = report.arch
    lines = [f"{report.source}",
             f"  {a.model_type}: L={a.n_layers} N={a.hidden} heads={a.n_heads} kv_heads={a.n_kv_heads} "
             f"d_h={a.head_dim} d_ff={a.d_ff} {a.activation} (L_φ={report.L_phi:.4g}) | mode={report.mode} "
             f"dtype={report.dtype} "
             f"logit scale={report.logit_scale:.4g} | grid m={round(1 / report.grid[1])} ({report.grid.size} points)",
             ""]
    head = (f"{'layer':>5} {'max σ1 QK':>10} {'max σ1 Ṽ':>10} {'σ1 M_in':>9} {'σ1 M_out':>9} "
            f"{'rank QK':>8} {'rank Ṽ':>7} {'log10 α':>8} {'mean p*':>8} {'Σ 𝒯*':>10}")
    lines += [head, "-" * len(head)]
    for l in range(report.L):
        ms = {t: report.select(t, l) for t in MULTI_HEAD_MATRIX_TYPES}
        allm = report.select(layer=l)
        lines.append(
            f"{l:>5} {max(m.sigma1 for m in ms['QK']):>10.4g} {max(m.sigma1 for m in ms['V']):>10.4g} "
            f"{max(m.sigma1 for m in ms['M_in']):>9.4g} {max(m.sigma1 for m in ms['M_out']):>9.4g} "
            f"{np.mean([m.rank for m in ms['QK']]):>8.3g} {np.mean([m.rank for m in ms['V']]):>7.3g} "
            f"{report.log_alpha[l] / math.log(10):>8.2f} {np.mean([m.p_star for m in allm]):>8.3f} "
            f"{_fmt(float(np.logaddexp.reduce([m.log_T_star for m in allm]))):>10}")
    if a.n_experts:
        lines += _expert_table(report)
    s = report.summary()
    lines += ["",
              f"  B_ours (Σ 𝒯* + √L, released)        {_fmt(report.log_B_ours_sum)}",
              f"  B_ours (√Σ 𝒯*² + √L)                {_fmt(report.log_B_ours_rss)}",
              f"  B_Edelman ((2,1) norms, released)   {_fmt(report.log_B_edelman)}",
              f"  B_Edelman with (1,1) norms [extension, not released]  "
              f"{_fmt(report.log_B_11) if math.isfinite(report.log_B_11) else 'not computed (opt in: --entrywise)'}",
              f"  p* = 0 for {100 * s['fraction_p_star_zero']:.0f}% of {s['n_matrices']} matrices "
              "(𝒯(W;0) = √(rank·N) in the released proxy: a rank count)"]
    return "\n".join(lines)


def _expert_table(report) -> list:
    """Lines of the per-expert table: every expert's ``M_in = [G | U]`` and ``M_out`` of every layer."""
    E = report.arch.n_experts
    head = (f"{'layer':>5} {'expert':>6} {'σ1 M_in':>9} {'σ1 M_out':>9} {'rank M_in':>9} {'rank M_out':>10} "
            f"{'p* M_in':>8} {'p* M_out':>8} {'𝒯* M_in':>10} {'𝒯* M_out':>10}")
    lines = ["", f"  {E} experts per layer (σ1 M_in / M_out above: the largest over them; the router is not a "
             "matrix of the bound):", head, "-" * len(head)]
    for l in range(report.L):
        for e in range(E):
            m_in, m_out = (next(m for m in report.select(t, l) if m.expert == e) for t in ("M_in", "M_out"))
            lines.append(f"{l:>5} {e:>6} {m_in.sigma1:>9.4g} {m_out.sigma1:>9.4g} {m_in.rank:>9d} {m_out.rank:>10d} "
                         f"{m_in.p_star:>8.3f} {m_out.p_star:>8.3f} {_fmt(m_in.log_T_star):>10} "
                         f"{_fmt(m_out.log_T_star):>10}")
    return lines


def _csv_text(rows) -> str:
    rows = [{k: printable(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows]
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _jsonable(x):
    import numpy as np

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, str):
        return printable(x)  # a folder name that is not UTF-8 (surrogate escapes) as \\xNN
    return x


def _parse_logit_scale(text: str):
    if text in ("1", "none"):
        return 1.0
    if text in ("inv_sqrt_dh", "inv-sqrt-dh", "1/sqrt(d_h)"):
        return "inv_sqrt_dh"
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'inv_sqrt_dh', got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"logit scale must be positive and finite, got {text!r}")
    return v


def _parse_device(text: str) -> str:
    """``--device``: a name :func:`bounds_lib.analysis.devices.resolve_device` knows (whether it is present is
    checked later)."""
    from ..analysis.devices import DEVICE_CHOICES, is_device_name

    if is_device_name(text):
        return text
    raise argparse.ArgumentTypeError(f"unknown device {text!r}; supported: {', '.join(DEVICE_CHOICES)}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Spectrum-adaptive bound proxies (Sakai & Imaizumi, "
                                "arXiv 2605.07297, Section 6) for Transformer checkpoints.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--mode", choices=("clean", "paper"), default="clean",
                        help="clean: QR-core spectra with exact zeros (default); paper: explicit N×N products "
                             "and full SVDs as the released code")
        sp.add_argument("--dtype", choices=("float64", "float32"), default="float64")
        sp.add_argument("--logit-scale", type=_parse_logit_scale, default=1.0,
                        help="multiply every QK_h: 1 (released, default), inv_sqrt_dh, or a number")
        sp.add_argument("--gamma-lphi", action="store_true", help="put L_φ into γ (the released γ omits it)")
        sp.add_argument("--layers", type=int, default=None, help="analyse only the first K layers (a prefix)")
        sp.add_argument("--prefix", default=None, metavar="NAME_PREFIX",
                        help="the tensor-name prefix of the layer stack to analyse when the weights hold "
                             "several (e.g. 'teacher.'); without it such a file is refused")
        sp.add_argument("--json", type=Path, help="write the full report as JSON (atomically; - for stdout)")
        sp.add_argument("--csv", type=Path,
                        help="write one row per matrix (analyze) or per model (scaling); - for stdout")
        sp.add_argument("--plots", type=Path, help="write the figures as PNG files into this folder")
        sp.add_argument("--threads", type=int, default=1,
                        help="BLAS threads (default 1: the matrices are small, and threaded BLAS on a busy "
                             "machine can be many times slower; 0 leaves the BLAS default)")
        sp.add_argument("--jobs", type=int, default=0,
                        help="worker processes, each decomposing one part of a layer at a time with --threads "
                             "BLAS threads (default 0: chosen — one per free CPU core where the work pays for "
                             "starting them, fewer if memory allows fewer, else this process alone; 1: in this "
                             "process; results are identical for every value)")
        sp.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                        help="dispatch the parts of the layers through this Dask distributed scheduler (extra "
                             "'grid'); the model folder must be at the same path on every worker")
        sp.add_argument("--scheduler-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up when the scheduler does not answer, has no worker or loses all its "
                             "workers for this many seconds (default 10)")
        sp.add_argument("--unit-timeout", type=float, default=None, metavar="SECONDS",
                        help="with --scheduler: give up when no part of a layer has finished for this many "
                             "seconds (default: no limit while the cluster has workers)")
        sp.add_argument("--resume", type=Path, default=None, metavar="DIR",
                        help="store every finished part in DIR at once and reuse the parts found there (same "
                             "checkpoint, mode, dtype, device): an interrupted run resumes where it stopped")
        sp.add_argument("--device", type=_parse_device, default=None, metavar="{cpu,cuda,cuda:K,auto,torch-cpu}",
                        help="where the dense SVDs run: cpu (NumPy/LAPACK, the default), cuda or cuda:K (torch on "
                             "that GPU, float64 unless --dtype float32), auto (cuda when torch sees one, else cpu), "
                             "torch-cpu (the torch code path on the CPU)")
        ew = sp.add_mutually_exclusive_group()
        ew.add_argument("--entrywise", dest="entrywise", action="store_true", default=False,
                        help="also compute the (1,1) norms of the head products and the (1,1) extension of "
                             "B_Edelman (opt-in: they need every explicit N×N head product, about 15%% more "
                             "time; nothing else uses them)")
        ew.add_argument("--no-entrywise", dest="entrywise", action="store_false",
                        help="skip the (1,1) norms (the default)")
        sp.add_argument("--allow-download", action="store_true",
                        help="download Hub models missing from the local cache (unless HF_HUB_OFFLINE is set)")
        sp.add_argument("--download-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="give up a Hub download after this many seconds (default 600, at most one "
                             "week); every request also waits at most 20 s for the server")
        sp.add_argument("--reproducible", action="store_true",
                        help="omit times and timings from the JSON report (identical runs give identical bytes)")
        g = sp.add_mutually_exclusive_group()
        g.add_argument("--progress", dest="progress", action="store_true", default=None,
                       help="always show the progress bar (default: only on a terminal)")
        g.add_argument("--no-progress", dest="progress", action="store_false")
        sp.add_argument("--quiet", action="store_true", help="no table on stdout")
        sp.add_argument("--debug", action="store_true", help="show tracebacks")

    a = sub.add_parser("analyze", help="spectra, p*, and the bound proxies of one model")
    a.add_argument("model", help="model directory or Hub id")
    common(a)
    s = sub.add_parser("scaling", help="the paper's depth and width figures for a family of checkpoints")
    s.add_argument("models", nargs="+", help="model directories or Hub ids")
    common(s)
    return p


class _UserError(Exception):
    pass


_PLOT_NAMES = {"analyze": ("spectral_decay", "p_star_histogram", "T_ratio", "norms", "prefix_depth"),
               "scaling": ("scaling",)}


def _writable_folder(folder: Path, what: str):
    """``folder`` (or, if it does not exist yet, its nearest existing parent) must be a writable folder."""
    f = folder
    while not f.exists():
        if f.parent == f:
            break
        f = f.parent
    if not f.is_dir():
        raise _UserError(f"{what}: {f} is not a folder")
    if not os.access(f, os.W_OK | os.X_OK):
        raise _UserError(f"{what}: folder {f} is not writable")


def _model_folder_files(d: Path) -> list:
    """The files of model folder ``d`` a run reads: everything in it, plus the weights and shards
    :func:`bounds_lib.checkpoints.weight_files` chooses (shards in a subfolder named by the index too)."""
    from ..checkpoints import CheckpointError, weight_files

    files = [d / "config.json", *d.iterdir()]
    try:
        files += weight_files(d)
    except CheckpointError:
        pass  # reported, with its own message, when the model is opened
    return files


def _model_input_files(args) -> dict:
    """``{real path: model}`` of every file a model named on the command line is read from: the files of a
    local model folder, or of the Hub cache snapshot a Hub id resolves to (its ``config.json`` is a link
    into the cache's blobs, which a report must not replace)."""
    from ..checkpoints import CheckpointError, resolve_hub_id

    models = [args.model] if args.command == "analyze" else list(args.models)
    files = {}
    for m in models:
        if not str(m).strip():
            continue  # rejected with its own message when opened
        try:
            d = Path(m).expanduser()
            if not d.exists():
                try:  # only the local cache: nothing is downloaded to check the outputs
                    d = resolve_hub_id(str(m), allow_download=False)
                except (CheckpointError, ValueError, OSError, ImportError):
                    continue
            if d.is_dir():
                for f in _model_folder_files(d):
                    files[os.path.realpath(f)] = m
        except (OSError, RuntimeError):
            continue  # the model is checked (with a clear message) when it is opened
    return files


def _output_targets(args) -> dict:
    """``{option: [paths]}`` of every file the run would write."""
    out = {}
    for opt in ("json", "csv"):
        if getattr(args, opt) is not None:
            out[f"--{opt}"] = [getattr(args, opt)]
    if args.plots is not None:
        out["--plots"] = [args.plots / f"{n}.png" for n in _PLOT_NAMES[args.command]]
    return out


def _check_outputs(args):
    """Everything about the outputs that can fail, checked before any computation."""
    if args.layers is not None and args.layers < 1:
        raise _UserError(f"--layers must be >= 1, got {args.layers}")
    if args.threads < 0:
        raise _UserError(f"--threads must be >= 0, got {args.threads}")
    if args.jobs < 0:
        raise _UserError(f"--jobs must be >= 0, got {args.jobs}")
    if not (math.isfinite(args.scheduler_timeout) and args.scheduler_timeout > 0):
        raise _UserError(f"--scheduler-timeout must be a positive number of seconds, got {args.scheduler_timeout:g}")
    if args.unit_timeout is not None and not (math.isfinite(args.unit_timeout) and args.unit_timeout > 0):
        raise _UserError(f"--unit-timeout must be a positive number of seconds, got {args.unit_timeout:g}")
    if args.resume is not None:
        if args.resume.exists() and not args.resume.is_dir():
            raise _UserError(f"--resume {args.resume}: exists and is not a folder")
        _writable_folder(args.resume, f"--resume {args.resume}")
    if args.device is not None and args.scheduler is None:
        from ..analysis.devices import resolve_device

        try:
            resolve_device(args.device)
        except (RuntimeError, ValueError) as exc:
            raise _UserError(str(exc)) from None
    from ..checkpoints import MAX_DOWNLOAD_TIMEOUT_S

    if not (math.isfinite(args.download_timeout) and 0 < args.download_timeout <= MAX_DOWNLOAD_TIMEOUT_S):
        raise _UserError(f"--download-timeout must be a positive number of seconds, at most "
                         f"{MAX_DOWNLOAD_TIMEOUT_S:g} (one week), got {args.download_timeout:g}")
    for opt in ("json", "csv"):
        path = getattr(args, opt)
        if path is None:
            continue
        if str(path) in ("", "."):
            raise _UserError(f"--{opt}: the output path is empty")
        try:
            if stream_target(path) is not None:
                continue  # '-', /dev/null, a FIFO, this process's stdout: written through, never replaced
        except _UserError as exc:
            raise _UserError(f"--{opt} {exc}") from None
        real = _through_links(path)
        if real.is_dir():
            raise _UserError(f"--{opt} {path}: is a directory")
        if not real.parent.is_dir():
            raise _UserError(f"--{opt} {path}: folder {real.parent} does not exist")
        if not os.access(real.parent, os.W_OK | os.X_OK):
            raise _UserError(f"--{opt} {path}: folder {real.parent} is not writable")
    if args.plots is not None:
        if args.plots.exists() and not args.plots.is_dir():
            raise _UserError(f"--plots {args.plots}: exists and is not a folder")
        _writable_folder(args.plots, f"--plots {args.plots}")
    seen = {}
    if args.plots is not None:
        seen[os.path.realpath(args.plots)] = f"--plots {args.plots} (a folder)"
    inputs = _model_input_files(args)
    for opt, paths in _output_targets(args).items():
        for path in paths:
            if opt == "--plots" and os.path.lexists(path) and not os.path.isfile(path):
                raise _UserError(f"{opt} {path}: exists and is not a regular file; a figure replaces only a "
                                 "regular file (move it away)")
            real = os.path.realpath(path)
            if real in seen:
                raise _UserError(f"{opt} {path}: the same file as {seen[real]}; give each output its own path")
            if real in inputs:
                raise _UserError(f"{opt} {path}: is a file of the model folder {inputs[real]} (an input); "
                                 "choose another path")
            seen[real] = f"{opt} {path}"


def _stage_plots(out: OutputSet, folder: Path, figures: dict):
    """Render every figure into temporary files inside ``folder`` (created if needed, removed on failure)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from ..core.style import STYLE_FILE

    out.make_folder(folder)
    with plt.style.context(str(STYLE_FILE)):  # the book's figure style (fonts, colours)
        for name, make in figures.items():
            fig = make()
            try:
                out.add_file(folder / f"{name}.png", lambda tmp, fig=fig: fig.savefig(tmp, dpi=150, format="png"))
            finally:
                plt.close(fig)


def _device_used(asked) -> str:
    """The device the SVDs ran on (``auto`` resolved: ``cuda`` or ``cpu``)."""
    from ..analysis.devices import resolve_device

    try:
        return resolve_device(asked).name
    except (RuntimeError, ValueError, TypeError):  # checked before the run; a device gone since then
        return str(asked)


def _analyze_one(model, args, label=None):
    from ..analysis.scoring import ScoringOptions, score
    from ..analysis.spectra import compute_spectra

    show = sys.stderr.isatty() if args.progress is None else args.progress
    bar, close_bar = _progress_bar(label or "spectra", enabled=show)
    t0 = time.perf_counter()
    try:
        sp = compute_spectra(model, mode=args.mode, dtype=args.dtype, n_layers=args.layers, progress=bar,
                             entrywise=args.entrywise, allow_download=True if args.allow_download else None,
                             jobs=args.jobs, download_timeout=args.download_timeout, prefix=args.prefix,
                             scheduler=args.scheduler, scheduler_timeout=args.scheduler_timeout,
                             unit_timeout=args.unit_timeout,
                             resume=args.resume, device=args.device)
    finally:
        close_bar()
    t1 = time.perf_counter()
    opts = ScoringOptions(logit_scale=args.logit_scale, gamma_L_phi=args.gamma_lphi)
    rep = score(sp, opts)
    rep.meta.update({"seconds_spectra": t1 - t0, "seconds_score": time.perf_counter() - t1})
    args.parallel = sp.meta.get("parallel", {})
    return sp, rep, opts


def _finish(args, texts: dict, figures: dict):
    """Stage every output, then commit them together (``args.outputs`` records the state)."""
    out = args.outputs = OutputSet()
    try:
        for path, text in texts.items():
            out.add(path, text)
        if args.plots is not None:
            _stage_plots(out, args.plots, figures)
        out.commit()
    except BaseException:
        out.rollback()
        raise


def _cmd_analyze(args):
    from ..analysis import plotting as P

    sp, rep, opts = _analyze_one(args.model, args)
    extra = {"model": args.model, "source": rep.source}
    if not args.reproducible:
        extra["timings_s"] = dict(rep.meta)
    meta = run_metadata(args, extra)
    texts = {}
    if args.json:
        d = rep.to_dict()
        d["meta"] = meta
        texts[args.json] = json.dumps(_jsonable(d), indent=1, ensure_ascii=False) + "\n"
    if args.csv:
        texts[args.csv] = _csv_text([m.to_row() for m in rep.matrices])
    _finish(args, texts, {
        "spectral_decay": lambda: P.figure_spectral_decay(sp),
        "p_star_histogram": lambda: P.figure_p_star_histogram(rep),
        "T_ratio": lambda: P.figure_T_ratio(rep),
        "norms": lambda: P.figure_norms(rep),
        "prefix_depth": lambda: P.figure_prefix_depth(sp, opts),
    })
    _print_table(args, lambda: format_table(rep))
    return 0


def _cmd_scaling(args):
    from ..analysis import plotting as P

    reports = []
    for i, model in enumerate(args.models):
        _, rep, _ = _analyze_one(model, args, label=f"[{i + 1}/{len(args.models)}] {model}"[-40:])
        reports.append((model, rep))
    rows = []
    for model, r in reports:
        s = r.summary()
        rows.append({"model": model, "L": r.L, "N": r.N, "heads": r.arch.n_heads,
                     "log10_B_ours_sum": s["B_ours_sum"]["log10"], "log10_B_ours_rss": s["B_ours_rss"]["log10"],
                     "log10_B_edelman": s["B_edelman"]["log10"],
                     "log10_B_edelman_11_extension": s["B_edelman_11_extension"]["log10"],
                     "fraction_p_star_zero": s["fraction_p_star_zero"]})
    texts = {}
    if args.json:
        texts[args.json] = json.dumps(_jsonable({"models": rows, "meta": run_metadata(args)}), indent=1,
                                      ensure_ascii=False) + "\n"
    if args.csv:
        texts[args.csv] = _csv_text(rows)
    _finish(args, texts, {"scaling": lambda: P.figure_scaling([r for _, r in reports])})
    def table():
        head = f"{'model':<44} {'L':>3} {'N':>5} {'log10 B_ours':>13} {'log10 B_Edelman':>16} {'p*=0':>6}"
        lines = [head, "-" * len(head)]
        for r in rows:
            lines.append(f"{r['model'][-44:]:<44} {r['L']:>3} {r['N']:>5} {r['log10_B_ours_sum']:>13.3f} "
                         f"{r['log10_B_edelman']:>16.3f} {100 * r['fraction_p_star_zero']:>5.0f}%")
        return "\n".join(lines)

    _print_table(args, table)
    return 0


def _print_table(args, make):
    """Print the terminal table, unless ``--quiet`` or a report goes to stdout (``-``, ``/dev/stdout``).

    A failure to print (stdout is ``/dev/full``) is one error line that says the reports are written.
    """
    if args.quiet or any(stream_target(p) == "stdout" for p in (args.json, args.csv) if p is not None):
        return
    try:
        print(printable(make()))
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _UserError(f"cannot print the table on standard output ({exc.strerror or exc}); "
                         f"{_written_note(args, interrupted=False)}") from None


def _written_note(args, interrupted: bool = True) -> str:
    out = getattr(args, "outputs", None)
    if out is None or out.state == "nothing":
        return "nothing was written"
    if out.state == "written":
        return "the reports were written completely" + (" before the interruption" if interrupted else "")
    return f"some outputs could not be removed ({out.problem})"


def printable(text: str) -> str:
    """``text`` with the bytes of an undecodable file name (surrogate escapes) written as ``\\xNN``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, so the outputs roll back as for Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _on_stop_signal(signum, frame):
    """Raise :class:`_Stopped` where the program is — or, inside :func:`_signals_held`, after the block."""
    if _HOLD["depth"]:
        _HOLD["pending"] = _HOLD["pending"] or signum
        return
    raise _Stopped(signum)


@contextlib.contextmanager
def _stop_signals_raise():
    """While the run lasts, SIGINT, SIGTERM and SIGHUP raise :class:`_Stopped` (a ``KeyboardInterrupt``),
    so that the outputs roll back; inside :func:`_signals_held` they wait for the block's end."""
    old = {}
    try:
        for sig in _STOP_SIGNALS:
            old[sig] = signal.signal(sig, _on_stop_signal)
    except ValueError:  # not the main thread: signals cannot be handled here
        pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        _HOLD["pending"] = None


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a Unix tool killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush must not fail again
    except (OSError, ValueError, AttributeError):
        pass
    return 128 + 13


def main(argv=None) -> int:
    """Entry point of the ``bounds-lib`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors: argparse prints and exits with 2
    args.argv = argv
    try:
        with _stop_signals_raise():
            _check_outputs(args)
            run = _cmd_analyze if args.command == "analyze" else _cmd_scaling
            if args.threads == 0:
                rc = run(args)
            else:
                from threadpoolctl import threadpool_limits

                from ..analysis import scoring  # noqa: F401  (loads numpy's and scipy's BLAS: threadpoolctl limits loaded ones)

                with threadpool_limits(args.threads):
                    rc = run(args)
            sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's final flush
        return rc
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        signum = getattr(exc, "signum", signal.SIGINT)
        what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        print(f"\n{PROG}: {what}; {_written_note(args)}", file=sys.stderr)
        return 128 + int(signum)
    except Exception as exc:  # one clear line unless --debug
        if args.debug:
            raise
        msg = " ".join(str(exc).split()) or type(exc).__name__
        from ..analysis.parallel import ClusterError

        if not isinstance(exc, (_UserError, ValueError, TypeError, OSError, ClusterError)):
            msg = f"{type(exc).__name__}: {msg}"
        sys.stderr.write("\n" if getattr(sys.stderr, "isatty", lambda: False)() else "")
        print(f"{PROG}: error: {printable(msg)}", file=sys.stderr)
        return 1
