"""All-or-nothing outputs of a ``bounds-lib`` run: staged, then renamed into place together (Chapter 6).

Every report and figure is written to a temporary file next to its destination (:class:`OutputSet`),
then all are renamed into place under a lock on each destination folder (``_FolderLocks``); a
failure or a stopping signal removes the files of the run and restores replaced ones. An output that is
not a regular file (``-``, ``/dev/null``, a FIFO) is written through (:func:`stream_target`).
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

from ..core.interrupts import signals_held
from .errors import _UserError, printable

#: The output name that means standard output (``--json -``), as command-line tools read it.
STDOUT = "-"
#: Seconds a run waits for another run's final renames into the same folder (they take milliseconds).
LOCK_WAIT_S = 60.0


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def _through_links(path) -> Path:
    """``path`` with symbolic links followed (a link is written through: its target is replaced)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _same_file_as_fd(st, fd: int) -> bool:
    try:
        return os.path.samestat(st, os.fstat(fd))
    except (OSError, ValueError):
        return False


def stream_target(path):
    """How an output that is not replaced by a rename is written, or ``None`` for a regular file.

    ``"stdout"`` for ``-`` or a path that is this process's standard output (``/dev/stdout`` into a
    pipe, say); ``"stderr"`` likewise; ``"through"`` for an existing character device (``/dev/null``)
    or FIFO, written through as ``open(path, "w")`` would. Raises
    ``_UserError`` for any other existing file that is not a regular file (a
    block device, a socket): never replaced, never written.
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
            with signals_held():  # made and recorded together: a signal cannot leave it unrecorded
                d.mkdir()
                self._dirs.append(d)

    def _tmp_for(self, dest: Path) -> Path:
        with signals_held():  # created and recorded together (a stray .tmp otherwise)
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
            with signals_held():
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
        with signals_held():
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


def _print_table(args, make):
    """Print the terminal table, unless ``--quiet`` or a report goes to stdout (``-``, ``/dev/stdout``).

    A failure to print (stdout is ``/dev/full``) is one error line that says the reports are written.
    """
    reports = (args.json, args.csv, getattr(args, "spectra", None))
    if args.quiet or any(stream_target(p) == "stdout" for p in reports if p is not None):
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
