"""Generate plain-Jupyter notebooks (launch copies and the student edition) from the MyST chapters.

The chapters live in ``notebooks/*.md`` (jupytext MyST). Jupyter, JupyterLab, Colab and Binder do not
render MyST, so every generated notebook is *plain Jupyter Markdown*, as the notebooks of the
best-known executable books are:

* glued values (``{glue:text}``, ``{glue:md}``, ``{glue:figure}``) are replaced by the executed
  values, formatted as on the page (MyST-NB's own formatter); figures become cell attachments;
* ``prf`` blocks become "**Definition 2.1 (title).** …", proofs "*Proof.* … ∎", exercises and
  solutions "**Exercise 2.1.**" / "**Solution to Exercise 2.1.**", labelled equations get
  ``\tag{2.1}``; numbers follow the book's (per chapter and per kind, chapter prefix);
* cross-references (``{ref}``, ``{numref}``, ``{prf:ref}``, ``{eq}``, ``{doc}``) become "Lemma 2.1"
  text linked to the online book; citations author–year text with a reference list at the end
  (``book/references.bib`` through pybtex);
* the first cell defines the book's TeX macros (from ``_config.yml``), the next ones are the title
  and a "run it yourself" install cell pinned to the commit the notebook was generated from.

Any directive or role this converter does not know is an error naming the file and line; a notebook
is never written with raw MyST in it.

* ``launch``  -> ``_build/launch``: the tree the Pages workflow pushes to the ``notebooks`` branch
  (which the Colab and Binder buttons open): ``notebooks/chXX_*.ipynb`` with the book's executed
  outputs, plus ``binder/``.
* ``student`` -> ``_build/student``: no outputs, every solution removed, numbering kept.

Executed values come from the book build's jupyter-cache (``_build/.jupyter_cache``), matched to
each chapter by its code; a chapter without a matching execution is executed here (nbclient).

Usage (from the repository root; ``make notebooks`` and ``make student`` call these)::

    python book/tools/make_notebooks.py launch  [--out _build/launch]  [--build _build] [CHAPTER.md ...]
    python book/tools/make_notebooks.py student [--out _build/student] [--build _build] [CHAPTER.md ...]
"""
from __future__ import annotations

import sys

# The generator lives in the package next to this file, one module per seam (book/tools is on sys.path
# for Sphinx's local_extensions, for the tests through conftest.py, and for a script run of this file).
from notebook_gen.common import *  # noqa: F401,F403
from notebook_gen.config import *  # noqa: F401,F403
from notebook_gen.blocks import *  # noqa: F401,F403
from notebook_gen.index import *  # noqa: F401,F403
from notebook_gen.bibliography import *  # noqa: F401,F403
from notebook_gen.glue import *  # noqa: F401,F403
from notebook_gen.converter import *  # noqa: F401,F403
from notebook_gen.rawmyst import *  # noqa: F401,F403
from notebook_gen.assembly import *  # noqa: F401,F403
from notebook_gen.editions import *  # noqa: F401,F403
from notebook_gen.kit import *  # noqa: F401,F403
from notebook_gen.blocks import _OPTION  # noqa: F401
from notebook_gen.converter import _EXPLICIT, _ROLE  # noqa: F401
from notebook_gen.common import _tags  # noqa: F401
from notebook_gen.editions import main

if __name__ == "__main__":
    sys.exit(main())
