"""Sphinx extension: execute the book's notebooks several at a time, before Sphinx reads them.

Loaded through ``_config.yml`` (``sphinx.local_extensions: {parallel_execution: book/tools}``).

MyST-NB's ``execute_notebooks: cache`` executes each notebook while Sphinx reads it, one after the
other: on a 2-core machine half the CPU idles through a clean build. Sphinx's own parallel reading
(``-j``) is not offered by ``jupyter-book build`` 1.x. This extension fills MyST-NB's jupyter-cache
first: on ``env-before-read-docs`` (Sphinx knows which documents it will read) it takes every
notebook among them exactly as MyST-NB will (MyST-NB's reader and configuration: same cells, same
metadata, so the same cache key), skips those the cache already holds, and executes the others
``nb_parallel_jobs`` at a time (default: one per core), each in its own kernel with MyST-NB's own
function (``jupyter_cache``'s ``single_nb_execution``), the configured timeout, ``allow_errors`` and
working directory; longest first, by their last run on this machine
(``~/.cache/bounds-lib-book/execution_seconds.json``, which only orders them). Each result is stored
in the cache as MyST-NB stores it (``execution_seconds`` included, which ``{nb-exec-table}`` shows);
MyST-NB then finds every notebook in the cache while reading and executes nothing.

Strictness is kept:

* a failing cell: nothing is cached for that notebook; with ``nb_execution_raise_on_error`` (the
  book's setting) the build stops after all notebooks have run, naming each failed notebook with its
  traceback, as MyST-NB's own execution would stop it (``tests/test_strict_build.py``);
* no notebook is executed twice: once reading is done, every notebook executed here must have been
  taken from the cache by MyST-NB (its recorded run time is this execution's); a notebook MyST-NB
  executed again (a cache key computed differently) is a build warning, an error under ``-W``.

Every kernel runs with one BLAS/OpenMP thread (``KERNEL_ENV``, unless the environment already sets
those variables): the parallelism is across notebooks, and two kernels each spinning two BLAS threads
on two cores ran BLAS-heavy cells many times slower; it also makes a chapter's numbers independent of
the number of cores of the machine that builds the book (Chapters 6, 7 and 9 pin one thread
themselves).

Nothing runs when execution is not ``cache`` (``make book-noexec`` sets it off), for notebooks with
their own ``mystnb`` metadata, or for those excluded by ``nb_execution_excludepatterns``: MyST-NB
handles them itself. ``BOUNDS_NB_JOBS`` (environment) overrides ``nb_parallel_jobs``.

The worker (one per notebook, a separate process so that kernels never share an event loop) is this
file run as a script: ``python parallel_execution.py IN.ipynb OUT.ipynb CWD TIMEOUT ALLOW_ERRORS``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext, suppress
from pathlib import Path, PurePosixPath

__all__ = ["KERNEL_ENV", "STARTS", "execute_one", "history_file", "jobs_for", "kernel_env", "kernel_never_started",
           "longest_first", "read_history", "setup", "write_history"]

_EXECUTED = "_bounds_parallel_executed"  # app attribute: {docname: execution_seconds}
#: The kernels' thread settings (applied where the environment does not set them already).
KERNEL_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def kernel_env(base=None) -> dict:
    """``base`` (default: ``os.environ``) with :data:`KERNEL_ENV` where it sets none of its own."""
    env = dict(os.environ if base is None else base)
    for key, value in KERNEL_ENV.items():
        env.setdefault(key, value)
    return env


def jobs_for(setting, pending: int, cpus: int | None = None) -> int:
    """How many notebooks run at once: the setting (0 or "auto": one per core), at most ``pending``."""
    env = os.environ.get("BOUNDS_NB_JOBS")
    value = env if env not in (None, "") else setting
    cpus = cpus or os.cpu_count() or 1
    n = cpus if value in (0, "0", "auto", None) else int(value)
    if n < 1:
        raise ValueError(f"nb_parallel_jobs / BOUNDS_NB_JOBS must be >= 1 or 'auto', got {value!r}")
    return max(1, min(n, pending))


def execute_one(nb_json: str, cwd: str, timeout, allow_errors: bool) -> dict:
    """Execute one notebook in a worker process; ``{"nb", "seconds", "error", "traceback"}``."""
    with tempfile.TemporaryDirectory(prefix="nb_parallel_") as tmp:
        src, out = Path(tmp) / "in.ipynb", Path(tmp) / "out.json"
        src.write_text(nb_json, encoding="utf8")
        r = subprocess.run([sys.executable, __file__, str(src), str(out), cwd, json.dumps(timeout),
                            json.dumps(bool(allow_errors))], capture_output=True, text=True, env=kernel_env())
        if r.returncode != 0 or not out.is_file():
            return {"nb": None, "seconds": None, "error": "WorkerError",
                    "traceback": f"the execution worker exited with {r.returncode}:\n{r.stderr[-4000:]}"}
        return json.loads(out.read_text(encoding="utf8"))


#: Kernel starts tried per notebook. Two kernels started at the same instant can die before their
#: first reply (seen once in a test run under load: "Kernel died before replying to kernel_info",
#: most likely two kernels given the same port); no cell has run then.
STARTS = 3


def kernel_never_started(exc: BaseException) -> bool:
    """Whether nbclient's error says the kernel died before it answered its first request."""
    return "before replying to kernel_info" in str(exc)


def _worker(argv: list[str]) -> int:
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    src, out, cwd, timeout, allow_errors = argv
    for attempt in range(STARTS):
        nb = nbformat.read(src, as_version=4)
        try:
            result = single_nb_execution(nb, cwd=cwd, timeout=json.loads(timeout),
                                         allow_errors=json.loads(allow_errors), meta_override=True)
            break
        except RuntimeError as exc:  # the kernel never started: no cell ran, so running again is the same run
            if not kernel_never_started(exc) or attempt == STARTS - 1:
                raise
            print(f"kernel did not start ({exc}); starting another", file=sys.stderr)
            time.sleep(1 + attempt)
    err = result.err
    Path(out).write_text(json.dumps({
        "nb": nbformat.writes(result.nb) if err is None else None,
        "seconds": result.time,
        "error": None if err is None else type(err).__name__,
        "traceback": result.exc_string,
    }), encoding="utf8")
    return 0


def _notebooks_to_execute(app, env, docnames):
    """``[(docname, path, notebook)]`` of the notebooks MyST-NB would execute and the cache lacks."""
    import nbformat
    from jupyter_cache import get_cache
    from myst_nb.core.read import create_nb_reader

    nb_config, md_config = env.mystnb_config, env.myst_config
    cache = get_cache(nb_config.execution_cache_path)
    todo = []
    for docname in docnames:
        path = Path(env.doc2path(docname))
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf8")
        reader = create_nb_reader(str(path), md_config, nb_config, text)
        if reader is None:
            continue  # a plain Markdown page
        notebook = reader.read(text)
        if nb_config.metadata_key in notebook.metadata:
            continue  # per-notebook MyST-NB settings: MyST-NB executes it itself
        posix = PurePosixPath(path.as_posix())
        if any(posix.match(p) for p in nb_config.execution_excludepatterns):
            continue
        # the kernel alias MyST-NB applies before it looks the notebook up (part of the cache key)
        kernel = notebook.metadata.get("kernelspec", {}).get("name")
        for rgx, alias in (nb_config.kernel_rgx_aliases or {}).items():
            if kernel is not None and re.fullmatch(rgx, kernel):
                notebook.metadata["kernelspec"]["name"] = alias
                break
        with suppress(KeyError):
            cache.match_cache_notebook(notebook)
            continue  # already cached
        todo.append((docname, path, nbformat.from_dict(notebook)))
    # Longest first, so that the last notebook to start is a short one: their last run on this machine
    # (the history file, which outlives `rm -rf _build`), or an older execution still in the cache.
    seconds = read_history()
    for record in cache.list_cache_records():
        seconds.setdefault(record.uri, float((record.data or {}).get("execution_seconds") or 0.0))
    return cache, longest_first(todo, seconds)


def longest_first(todo: list, seconds: dict) -> list:
    """``todo`` (tuples whose second item is the notebook's path) by decreasing last run time; a notebook
    never timed first (it may be the longest), ties in the given order."""
    return sorted(todo, key=lambda item: -seconds.get(str(item[1]), float("inf")))


def history_file() -> Path:
    """This machine's record of each notebook's last execution time (used for the order only);
    ``BOUNDS_NB_HISTORY`` names another file."""
    if os.environ.get("BOUNDS_NB_HISTORY"):
        return Path(os.environ["BOUNDS_NB_HISTORY"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bounds-lib-book" / "execution_seconds.json"


def read_history() -> dict:
    with suppress(OSError, ValueError):
        data = json.loads(history_file().read_text(encoding="utf8"))
        if isinstance(data, dict):
            return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}
    return {}


def write_history(new: dict) -> None:
    """Add ``{path: seconds}`` to the history file (best effort: a read-only home only loses the order)."""
    with suppress(OSError):
        path = history_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        kept = {k: v for k, v in dict(read_history(), **new).items() if Path(k).exists()}  # no stale entries
        tmp.write_text(json.dumps(kept, indent=1, sort_keys=True), encoding="utf8")
        os.replace(tmp, path)


def _before_read(app, env, docnames):
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    config = getattr(env, "mystnb_config", None)
    if config is None or config.execution_mode != "cache":
        return
    cache, todo = _notebooks_to_execute(app, env, docnames)
    if not todo:
        return
    import nbformat
    from jupyter_cache.base import CacheBundleIn

    jobs = jobs_for(app.config.nb_parallel_jobs, len(todo))
    log.info(f"[parallel_execution] executing {len(todo)} notebook(s), {jobs} at a time")
    t0 = time.perf_counter()

    def run(item):
        docname, path, notebook = item
        temp = tempfile.TemporaryDirectory() if config.execution_in_temp else nullcontext(str(path.parent))
        with temp as cwd:
            return item, execute_one(nbformat.writes(notebook), os.path.abspath(cwd), config.execution_timeout,
                                     config.execution_allow_errors)

    executed, failed, timed = getattr(app, _EXECUTED, {}), [], {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for (docname, path, _), res in pool.map(run, todo):
            if res["error"] is not None:
                failed.append((docname, res))
                log.warning(f"Executing notebook failed: {res['error']}\n{res['traceback'] or ''}",
                            location=docname, type="mystnb", subtype="exec")
                continue
            nb = nbformat.reads(res["nb"], as_version=4)
            cache.cache_notebook_bundle(CacheBundleIn(nb, str(path), data={"execution_seconds": res["seconds"]}),
                                        check_validity=False, overwrite=True)
            executed[docname] = res["seconds"]
            timed[str(path)] = res["seconds"]
            log.info(f"[parallel_execution] {docname}: {res['seconds']:.1f} s")
    setattr(app, _EXECUTED, executed)
    write_history(timed)
    log.info(f"[parallel_execution] {len(todo)} notebook(s) in {time.perf_counter() - t0:.1f} s wall")
    if failed and config.execution_raise_on_error:
        from sphinx.errors import ExtensionError

        names = ", ".join(d for d, _ in failed)
        raise ExtensionError(f"notebook execution failed ({len(failed)}): {names}\n\n"
                             + "\n\n".join(f"{d}:\n{r['traceback']}" for d, r in failed))


def _after_read(app, env):
    """Every notebook executed here was read from the cache by MyST-NB (not executed a second time)."""
    from myst_nb.sphinx_ import NbMetadataCollector
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    for docname, seconds in sorted(getattr(app, _EXECUTED, {}).items()):
        data = NbMetadataCollector.get_exec_data(env, docname) or {}
        if data.get("runtime") != seconds:
            log.warning(f"MyST-NB executed {docname} again: its cache key differs from the one computed by "
                        "book/tools/parallel_execution.py (the notebook ran twice)", location=docname,
                        type="mystnb", subtype="exec")
    setattr(app, _EXECUTED, {})


def setup(app):
    app.add_config_value("nb_parallel_jobs", "auto", "env")
    app.connect("env-before-read-docs", _before_read)
    app.connect("env-updated", _after_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
