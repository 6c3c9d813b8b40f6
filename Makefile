# Two commands: `make demo` and `make test`. Each sets up .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= dev,ray,smoke

.PHONY: demo test test-slow lint bench setup clean

# torch for `cleanpipe smoke`: torch==2.13.0 exactly is the CPU build here (any other version
# pulls a multi-GB CUDA build); installed first so the `smoke` extra finds it satisfied.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cleanpipe demo --output out/demo --overwrite

test: $(STAMP)
	$(PY) -m pytest -m "not slow" cleanpipe tests

test-slow: $(STAMP)
	$(PY) -m pytest -m slow tests

lint: $(STAMP)
	$(VENV)/bin/ruff check cleanpipe tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) out build *.egg-info
