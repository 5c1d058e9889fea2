# The README's two commands. Both create .venv (Python 3.10+) and install from the package index.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench lint docs clean-cache

$(VENV)/.base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.base
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

## make demo: the matrix-exponential benchmark (about a minute)
demo: $(VENV)/.base
	$(PY) benchmarks/matexp.py

## make test: the fast test suite (slow tests: make test PYTEST_ARGS="-m slow"), on up to
## TEST_WORKERS processes (pytest-xdist; each file's tests in one process, so that the numba
## kernels a file needs compile once; TEST_WORKERS=0 runs in this process alone)
TEST_WORKERS ?= auto
test: $(VENV)/.dev
	$(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile) $(PYTEST_ARGS)

## make bench: every benchmark, with cold-cache compile times and the peers that are installed
## (PyTorch: pip install torch==2.13.0; JAX, diffrax, torchdiffeq: pip install jax diffrax torchdiffeq)
bench: $(VENV)/.base
	$(PY) benchmarks/matexp.py --compile-times --peers
	$(PY) benchmarks/neural_ode.py --compile-times --peers
	$(PY) benchmarks/lenet5.py --peers

## make docs: the documentation site into site/ (MkDocs; the notebooks are rendered, not run)
$(VENV)/.docs: $(VENV)/.base
	$(PY) -m pip install -q -e '.[docs]'
	touch $@

docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests benchmarks

## numba's cache does not track edits across modules: clear it after changing kernels
clean-cache:
	find src tests benchmarks -name '*.nbi' -delete -o -name '*.nbc' -delete
