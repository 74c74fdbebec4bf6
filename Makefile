# Two commands set up a fresh machine (see README):
#   make book   — build the book into _build/html (creates .venv and installs pinned deps on first use)
#   make test   — clean, strict, forced-execution book build, then the whole pytest suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JB := $(VENV)/bin/jupyter-book
STAMP := $(VENV)/.installed-stamp
# No network at build or test time: models come from the local cache or installed packages only.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
# Progress bars in executed cells would be saved as ipywidgets (CDN scripts in the offline pages).
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export TQDM_DISABLE := 1
export PYTHONHASHSEED := 0
# Bytecode is written beside each module (__pycache__, git-ignored) even where the environment sets
# PYTHONDONTWRITEBYTECODE (this project's machines do): otherwise every Python process of the build and the
# suite (pytest workers, notebook kernels, the commands and pool workers the tests start) compiles the
# library's modules again: 0.8 s of CPU to import the command's modules against 0.2 s from bytecode.
unexport PYTHONDONTWRITEBYTECODE
STRICT := -W -n --keep-going
# The test suite runs one pytest-xdist worker more than the cores this process may use (at most 4: the
# longest tests bound it beyond that): the suite waits on subprocesses, browsers and files about an
# eighth of the time, and a third worker on 2 cores fills it (benchmarks/BUILD_TIMES.md: pytest 802 s
# against 856 s with 2, same machine, same hour). worksteal: each worker starts with a contiguous share of the tests and an idle one takes
# queued tests from the end of a busy one's share; tests/schedule.py opens every share with the known
# long tests (tests/durations.json: a few take minutes), so none of them is left to run alone at the end. Not loadgroup: xdist 3.8.0 groups by renaming item._nodeid, which
# pytest 9.2 no longer reads, so xdist_group marks are ignored; the expensive fixtures are shared
# between workers through files instead (tests/test_notebooks_outside.py, made_once).
TEST_JOBS ?= $(shell python3 -c 'import os; print(len(os.sched_getaffinity(0)) + 1)' 2>/dev/null || echo auto)
PYTEST_ARGS ?= -n $(TEST_JOBS) --maxprocesses 4 --dist worksteal

.PHONY: venv book book-strict test unit lint browser-deps clean page format-chapters book-noexec reproducibility notebooks student lab pdf pdf-deps mutation

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[book,dev]'
	@touch $(STAMP)

venv: $(STAMP)

## Local build: re-executes only notebooks whose code changed (jupyter-cache in _build/.jupyter_cache).
## The course kit (book/tools/course_kit.py) is written into the site: _build/html/kit/ holds the
## chapters' notebooks with and without outputs, the student edition zip, the reading guide's notebook
## and, after `make pdf`, the PDF; the front page links them.
book: $(STAMP)
	$(JB) build . $(STRICT)
	@echo "Book: file://$(CURDIR)/_build/html/index.html (course kit: _build/html/kit/)"

## Strict build from scratch: no cache, every notebook executed (one per core, in temporary folders:
## book/tools/parallel_execution.py), any warning or cell error fails.
book-strict: $(STAMP)
	rm -rf _build
	$(JB) build . $(STRICT) --all

## Unit tests only (fast feedback): everything but the tests marked `slow` (optimiser runs, scratch book
## builds, chapters run outside the repository), `book` (read _build) and `browser` (Chromium); those
## run in `make test`.
unit: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS) -q -m "not slow and not book and not browser"

## Lint (ruff, pinned in constraints.txt; rules in pyproject.toml's [tool.ruff]).
lint: $(STAMP)
	$(VENV)/bin/ruff check bounds_lib tests book/tools benchmarks

## Install Debian's Chromium for the browser test when we are root and it is missing.
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "browser-deps: could not install chromium; browser tests will be skipped"; \
	  else echo "browser-deps: /usr/bin/chromium missing and not root; browser tests will be skipped"; fi; \
	fi

## The test command of the README: lint (fails fast), strict book build, then every test (browser tests
## read _build/html), on one worker more than the cores (PYTEST_ARGS; TEST_JOBS=0 runs it in this one process).
test: lint book-strict browser-deps
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf _build

## Mutation testing (mutmut 3) of the bound modules, each against its own fast tests, in scratch copies
## under mutants/ (git-ignored); reports in mutants/<module>/report.txt, survivors recorded in tests/MUTATION.md.
##   make mutation MODULES="norms interpolation" MUTATION_JOBS=2
MODULES ?= norms interpolation propagation peeling orders scoring spectra checkpoints theorem stats results report
## MUTATION_FLAGS=--bounds-only leaves out the falsification-harness functions (and the slow optimiser tests)
MUTATION_FLAGS ?=
MUTATION_JOBS ?= 2
mutation: $(STAMP)
	$(PY) tests/mutation/run_mutation.py $(MODULES) --jobs $(MUTATION_JOBS) $(MUTATION_FLAGS)

## Format the code of chapters for reading (comments above the line, ruff format at 88 characters):
##   make format-chapters CHAPTERS="notebooks/ch07_trained.md"
format-chapters: $(STAMP)
	@test -n "$(CHAPTERS)" || (echo "usage: make format-chapters CHAPTERS=\"notebooks/chXX_name.md ...\""; exit 2)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) book/tools/format_chapters.py $(CHAPTERS)

## Execute one chapter alone (fast check while writing): make page NB=notebooks/ch02_interpolation.md
page: $(STAMP)
	@test -n "$(NB)" || (echo "usage: make page NB=notebooks/chXX_name.md"; exit 2)
	@mkdir -p /tmp/bounds_pages
	cd $(dir $(NB)) && $(CURDIR)/$(VENV)/bin/jupytext --to ipynb --execute --output /tmp/bounds_pages/$(notdir $(NB:.md=.ipynb)) $(notdir $(NB))
	@echo "executed OK: /tmp/bounds_pages/$(notdir $(NB:.md=.ipynb))"

## Whole-book Sphinx check without executing notebooks, into a private folder (MyST/Sphinx warnings;
## glue references cannot resolve without execution, so only their warnings are silenced here):
##   make book-noexec OUT=/tmp/mybuild
book-noexec: $(STAMP)
	@test -n "$(OUT)" || (echo "usage: make book-noexec OUT=/tmp/somewhere"; exit 2)
	sed -e 's/execute_notebooks: cache/execute_notebooks: "off"/' \
	    -e 's/suppress_warnings: \["mystnb.unknown_mime_type"\]/suppress_warnings: ["mystnb.unknown_mime_type", "mystnb.glue", "mystnb.glue_ref"]/' \
	    -e 's|^\(    [a-z_]*\): book/tools$$|\1: $(CURDIR)/book/tools|' \
	    _config.yml > $(OUT).config.yml
	$(JB) build . $(STRICT) --all --config $(OUT).config.yml --path-output $(OUT)

## Two clean builds must print identical numbers: build twice into /tmp and compare every output (exactly:
## meaningful on one machine; across CPU kinds committed rows are checked by bounds_lib.studies.reproduce to a tolerance).
reproducibility: $(STAMP)
	rm -rf /tmp/bounds_repro_a /tmp/bounds_repro_b
	$(JB) build . $(STRICT) --all --path-output /tmp/bounds_repro_a
	$(JB) build . $(STRICT) --all --path-output /tmp/bounds_repro_b
	$(PY) tests/compare_executed_outputs.py /tmp/bounds_repro_a/_build /tmp/bounds_repro_b/_build

## Launchable notebooks for Colab/Binder (the tree the Pages workflow pushes to the `notebooks` branch;
## `make book` writes the same into _build/html/kit/): plain Jupyter notebooks with the book's executed
## outputs and numbers, in _build/launch/notebooks/, + binder/. Uses the executions of `make book` (a
## chapter without one is executed). Some chapters only: make notebooks CHAPTERS="notebooks/ch02_interpolation.md"
notebooks: $(STAMP)
	$(PY) book/tools/make_notebooks.py launch --out _build/launch $(CHAPTERS)

## Student edition: every chapter as a notebook without outputs and without solutions, with a self-check
## cell under each exercise that has a single answer, in _build/student and _build/student-edition.zip.
## Nothing is executed (seconds): glued numbers come from `make book`'s executions, or link to the online
## book where there are none. `make book` writes the same zip into the site (_build/html/kit/).
student: $(STAMP)
	$(PY) book/tools/make_notebooks.py student --out _build/student --zip _build/student-edition.zip $(CHAPTERS)

## JupyterLab on the .md chapters themselves (jupytext opens them as notebooks, jupyterlab-myst renders
## the MyST): installs the `lab` extra on first use; saving a notebook writes the .md.
lab: $(STAMP)
	@$(PY) -c "import jupyterlab, jupytext, jupyterlab_myst" 2>/dev/null || $(PY) -m pip install -q -c constraints.txt -e '.[lab]'
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	cd notebooks && $(CURDIR)/$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

## PDF of the book (XeLaTeX): _build/latex/book.pdf. Needs a TeX toolchain: `make pdf-deps` (Debian, ~120 MB).
pdf: $(STAMP)
	$(JB) build . --builder pdflatex $(STRICT)
	@echo "PDF: $(CURDIR)/_build/latex/book.pdf"

pdf-deps:
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  texlive-latex-extra texlive-xetex texlive-fonts-recommended latexmk fonts-freefont-otf tex-gyre
