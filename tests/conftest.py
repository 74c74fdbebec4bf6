"""Shared test setup: the offline Hub switches, the hypothesis profile, and the fixtures any test may use —
``rng``, ``tiny_bert_dir`` (the one tiny-checkpoint writer, tests/tiny_checkpoints.py) and ``browser`` /
``open_page`` / ``typeset_page`` (the built book in Chromium, tests/book_html.py). The markers ``slow``, ``book`` and
``browser`` are registered in pyproject.toml (``make unit`` leaves all three out)."""
import os
import sys
from pathlib import Path

# Under pytest-xdist (`make test`: one worker per core) each worker, and every process it starts,
# keeps to one BLAS/OpenMP thread: N workers each spinning N BLAS threads on N cores made BLAS-heavy
# tests many times slower. Set before NumPy is imported here; threadpoolctl below covers a library
# loaded earlier. A value already in the environment is kept.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

# The book's tools (book/tools: the notebook generator, the Sphinx extension) import as top-level
# modules, as Sphinx loads them (`local_extensions` in _config.yml): `import make_notebooks`
# (book_html.py below reads phone_math_report's scripts).
TOOLS = Path(__file__).resolve().parents[1] / "book" / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from book_html import browser, open_page, typeset_page  # noqa: F401,E402  (fixtures of the browser tests, shared from here)
from schedule import longest_first_shared, read_durations  # noqa: E402
from tiny_checkpoints import write_tiny_bert  # noqa: E402

if XDIST_WORKER and os.environ.get("OPENBLAS_NUM_THREADS") == "1":
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)

# The library's record of this machine's worker start-up and SVD rate (bounds_lib.analysis.pool.machine_record)
# is the tests' own, not the user's ~/.cache: one file per test process, removed when the process ends.
_OWN_RECORD = None
if "BOUNDS_LIB_MACHINE_RECORD" not in os.environ:
    _OWN_RECORD = os.path.join(__import__("tempfile").gettempdir(), f"bounds-lib-tests-{os.getpid()}-machine.json")
    os.environ["BOUNDS_LIB_MACHINE_RECORD"] = _OWN_RECORD
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.load_profile("ci")


def pytest_unconfigure(config):
    if _OWN_RECORD:
        Path(_OWN_RECORD).unlink(missing_ok=True)


def pytest_collection_modifyitems(config, items):
    """Under xdist, the known long tests first, shared between the workers' blocks (tests/schedule.py);
    in one process the order is left alone (nothing to balance, and module fixtures stay together)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    seconds = read_durations()
    if workers < 2 or not seconds:
        return
    order = longest_first_shared([item.nodeid for item in items], seconds, workers)
    items[:] = [items[i] for i in order]


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    """Factory: ``tiny_bert_dir(**options) -> Path`` writes a tiny BERT checkpoint into a fresh folder.

    Options are those of :func:`tiny_checkpoints.write_tiny_bert` (sizes ``hidden=32, layers=2, heads=4,
    intermediate=64``, ``init_std``, ``seed``, torch ``dtype``, ``max_shard_size``, hand-made ``weights``
    with ``shard_by_layer``, and ``config.json`` overrides as keywords). Each call writes a new folder,
    so a test may damage its copy; session-scoped so module-scoped fixtures can call it too.
    """
    def make(**options):
        return write_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), **options)

    return make
