"""The notebook generator behind `make notebooks` and `make student`, along its seams.

* ``common`` — Shared names: paths, tags, the error type
* ``config`` — Book configuration: repository, online pages, macros, chapter numbers
* ``blocks`` — Block structure of MyST markdown: text, code fences, directives (nested)
* ``index`` — Book index: numbers and titles of every label, from all chapters and reference pages
* ``bibliography`` — Bibliography: author-year labels and a reference list (pybtex)
* ``glue`` — Glue values from the book's executions
* ``converter`` — The converter
* ``rawmyst`` — Raw-MyST detector (what must never reach a generated notebook)
* ``assembly`` — Notebook assembly
* ``editions`` — Editions
* ``kit`` — The course kit written into the built site (``_build/html/kit``)

``book/tools/make_notebooks.py`` is the command line and re-exports every name.
"""
