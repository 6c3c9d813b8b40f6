# Two commands: `make demo` and `make test`. Each sets up .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-test
# numba kernels compiled ahead of time (cleanpipe/precompiled.py): a small run compiles nothing
KERNELS := cleanpipe/precompiled.py cleanpipe/dedup/kernels.py cleanpipe/dedup/part_kernels.py \
	cleanpipe/text/byte_kernels.py
# the build writes the generic module, then the one for this CPU: the last one written stands
# for both (a checkout built before there was a host module builds again)
PRECOMPILED := cleanpipe/_precompiled_host.json

.PHONY: demo test test-slow lint bench setup clean

# demo needs only the package; the tests also need the dev, ray and smoke tooling
$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(BASE)

# torch for `cleanpipe smoke`: torch==2.13.0 exactly is the CPU build here (any other version
# pulls a multi-GB CUDA build); installed first so the `smoke` extra finds it satisfied.
$(FULL): pyproject.toml $(BASE)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,ray,smoke,trainers]"
	touch $(FULL)

# bytecode too: an editable install has none, and where PYTHONDONTWRITEBYTECODE is set (CI
# images often do) every command compiled cleanpipe's ~140 modules again (~0.1 s a start)
$(PRECOMPILED): $(BASE) $(KERNELS)
	$(PY) -m cleanpipe.precompiled
	$(PY) -m compileall -q cleanpipe

# LLaMA-Factory for the trainer-profile comparison (tests/test_trainer_profiles.py): its pins
# (torch, transformers, datasets, trl) conflict with ours, so it gets its own venv that sees
# .venv's packages through a .pth file and adds only what its supervised-processor import
# path needs, installed without dependencies (a few seconds, ~5 MB).
LF_VENV := .venv-llamafactory
LF := $(LF_VENV)/.installed

$(LF): $(FULL)
	test -x $(LF_VENV)/bin/python || $(PYTHON) -m venv --without-pip $(LF_VENV)
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	  "$$($(LF_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/project-venv.pth"
	$(PY) -m pip --python $(LF_VENV)/bin/python install -q --no-deps llamafactory==0.9.5 peft==0.18.1 \
	  omegaconf==2.4.0 antlr4-python3-runtime==4.13.2
	touch $(LF)

$(LF_VENV): $(LF)


setup: $(FULL) $(PRECOMPILED)

demo: $(BASE) $(PRECOMPILED)
	$(VENV)/bin/cleanpipe demo --output out/demo --overwrite

# lint first (seconds); pytest's summary line counts the skips (tests/conftest.py adds a
# "skips:" line; with CI=true any skip off tests/allowed_skips.txt fails the run); then the
# wall time of it all
test: $(FULL) $(LF) $(PRECOMPILED) lint
	@start=$$(date +%s); status=0; \
	$(PY) -m pytest -m "not slow" --durations=15 cleanpipe tests || status=$$?; \
	echo "make test: wall time $$(( $$(date +%s) - start )) s"; exit $$status

test-slow: $(FULL) $(LF) $(PRECOMPILED)
	@start=$$(date +%s); status=0; \
	$(PY) -m pytest -m slow tests || status=$$?; \
	echo "make test-slow: wall time $$(( $$(date +%s) - start )) s"; exit $$status

# ruff, then vulture for names nothing uses (paths and exceptions: [tool.vulture] in
# pyproject.toml)
lint: $(FULL)
	$(VENV)/bin/ruff check cleanpipe tests benchmarks
	$(PY) -m vulture

# the peer tools (datatrove, data-juicer) get virtual environments of their own, made by
# benchmarks/peers/setup_peers.py; only rensa, a plain library, goes into .venv
bench: $(FULL)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(LF_VENV) out build *.egg-info
