# dpmf-lit: `make reproduce` and `make test` are all a newcomer needs (Python 3.10+ and make).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CONSTRAINTS := .ci/constraints.txt
PROFILE ?= quick
JOBS    ?= 1

.PHONY: install reproduce outputs test test-fast test-slow check-reproduction docs preview readme export clean-nbs bench lock help
help:
	@echo "make reproduce   create .venv, install, fetch MovieLens 100K, regenerate every figure (PROFILE=$(PROFILE)), then make outputs"
	@echo "make outputs     run the paper notebooks (nbs/01*-09*) whose stored outputs are stale and store their outputs"
	@echo "make test        create .venv if needed, install, run every test"
	@echo "make test-fast   the tests not marked slow (a few minutes, while working); make test-slow: the others"
	@echo "make check-reproduction  before a release: a fresh clone reproduces every quick number, then passes make test"
	@echo "make docs        process and check the notebooks, render the site with Quarto where it is installed"
	@echo "make preview     the site as offline HTML in site-preview/, math typeset by a local MathJax (no Quarto needed)"
	@echo "make readme      regenerate README.md from nbs/index.ipynb (a test fails when they differ)"
	@echo "make bench       rating updates per second against Surprise and libmf"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "dpmf-lit needs Python 3.10+; this is " + sys.version.split()[0] + " (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[dev,bench]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name python3 >/dev/null
	touch $@

# numba's on-disk cache notices a change to a kernel's own module only, not to a kernel it calls from another
# module (a stale copy would run): after any change to the package source, every kernel compiles afresh once,
# here, by `dpmf warmup` (a progress line), so that the first fit a user times is a fit.
NUMBA_STAMP := dpmf_lit/__pycache__/.numba-source-stamp
install: $(STAMP)
	@if [ ! -e $(NUMBA_STAMP) ] || [ -n "$$(find dpmf_lit -name '*.py' -newer $(NUMBA_STAMP) | head -1)" ]; then \
	  find dpmf_lit \( -name '*.nbi' -o -name '*.nbc' \) -delete; mkdir -p dpmf_lit/__pycache__; \
	  $(BIN)/dpmf warmup || echo "dpmf warmup: some kernels will compile on first use instead"; \
	  touch $(NUMBA_STAMP); fi

reproduce: install
	$(BIN)/dpmf data fetch ml-100k
	$(BIN)/dpmf reproduce --profile $(PROFILE) --jobs $(JOBS)
	@if [ "$(PROFILE)" = quick ]; then $(MAKE) --no-print-directory outputs; \
	 else echo "the notebooks quote the quick profile's numbers: their outputs are stored by 'make outputs' after 'make reproduce PROFILE=quick'"; fi

# The paper notebooks, run in place with their outputs stored (deterministic; stamped in figures/outputs.json).
outputs: install
	$(BIN)/dpmf reproduce --outputs

# Every test: the notebooks' own tests, then both lanes of the test suite.
test: install
	$(BIN)/dpmf data fetch ml-100k
	$(BIN)/nbdev-test --n-workers 2
	$(BIN)/python -m pytest

# The fast lane, while working (a few minutes on 2 cores): every test not marked slow.
test-fast: install
	$(BIN)/dpmf data fetch ml-100k
	$(BIN)/python -m pytest -m "not slow"

# The slow lane alone: the smoke batch, paper profiles on fixtures, the site, the wheel, the backends.
test-slow: install
	$(BIN)/dpmf data fetch ml-100k
	$(BIN)/python -m pytest -m slow

# A fresh clone of HEAD (default under ~/.cache/dpmf-lit/): make reproduce, --status, --compare HEAD, make test.
check-reproduction:
	bash .ci/check-reproduction $(CHECK_DIR)

bench: install
	$(BIN)/dpmf bench

export: install
	$(BIN)/nbdev-export
	$(BIN)/nbdev-clean

# Never nbdev-proc-nbs/nbdev-docs here: without Quarto they try to download and install it with sudo.
docs: install
	$(BIN)/python -m dpmf_lit.batch.site --docs

preview: install
	$(BIN)/python -m dpmf_lit.batch.site --preview site-preview
	@echo "open site-preview/index.html"

readme: install
	$(BIN)/python -c 'from dpmf_lit.studies.compare import sync_index; sync_index()'
	$(BIN)/python -c 'from dpmf_lit.studies.audit import sync_papers_table; sync_papers_table()'
	$(BIN)/python -c 'from dpmf_lit.studies.ranking import sync_ranking_index; sync_ranking_index()'
	$(BIN)/python -m dpmf_lit.batch.site --readme

lock:
	{ echo "# Tested versions of every dependency (CPython 3.11, Linux x86_64). Used by 'make install' as pip constraints."; \
	  echo "# They apply on Python >= 3.11 (several pins, e.g. numpy 2.4, need 3.11); on Python 3.10 pip resolves"; \
	  echo "# freely within pyproject.toml's lower bounds (untested). Regenerate with 'make lock' after upgrading"; \
	  echo "# and re-running 'make test'."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v -e '^-e' -e '^dpmf' | sed 's/$$/ ; python_version >= "3.11"/'; } > $(CONSTRAINTS)
