"""``python -m bounds_lib`` and the ``bounds-lib`` console script: the command in a process of its own.

Before the library is imported, the BLAS thread count the command will use (``--threads``, default 1) is
put in ``OPENBLAS_NUM_THREADS`` (:func:`_pin_blas_at_load`), so that NumPy's and SciPy's OpenBLAS start
that many threads when they load instead of one per core. The extra threads were limited to one by the
command's own policy (:func:`bounds_lib.analysis.threads.blas_threads`) but had started and spun first:
on the 2-core reference machine about 0.1 s of CPU per process, taken from whatever else runs. A caller of
:func:`bounds_lib.cli.main` keeps its environment.
"""
import os
import sys

#: Variables OpenBLAS reads its thread count from when it loads (the first one set wins); where the user
#: set any of them, the command leaves the start-up to them (its ``--threads`` still applies to the run).
BLAS_LOAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def _threads_asked(argv) -> int | None:
    """``--threads`` as the command's parser will read it from ``argv`` (1, its default, where absent);
    None where this scan cannot be sure: the option twice, a value that is not a positive whole number
    (``0`` leaves BLAS its own default), a missing value. Any abbreviation argparse accepts (``--th`` and
    longer; ``--t`` is also ``--top-k``) counts."""
    seen = []
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if len(name) >= 4 and "--threads".startswith(name):
            seen.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    if not seen:
        return 1
    if len(seen) > 1 or not seen[0].isdigit() or int(seen[0]) < 1:
        return None
    return int(seen[0])


def _pin_blas_at_load(argv) -> bool:
    """Put the command's BLAS thread count in the environment before NumPy loads OpenBLAS; whether it did
    (not where NumPy is loaded already, where the user set a thread variable, or where ``_threads_asked``
    cannot be sure)."""
    threads = _threads_asked(argv)
    if threads is None or "numpy" in sys.modules or any(v in os.environ for v in BLAS_LOAD_VARIABLES):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    return True


def main() -> int:
    """The console script: pin BLAS at load (:func:`_pin_blas_at_load`), then run :func:`bounds_lib.cli.main`."""
    _pin_blas_at_load(sys.argv[1:])
    from .cli import main as command

    return command()


if __name__ == "__main__":
    sys.exit(main())
