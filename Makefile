# Two commands: `make demo` and `make test`. Each sets up .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= dev,ray

.PHONY: demo test test-slow lint bench setup clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
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
