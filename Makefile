# Two commands on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch/torchvision: the pair below is what this project's machines carry on disk; real users get
# their own build through the ranges in pyproject.toml.
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1

.PHONY: demo test test-all lint bench-ultralytics clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m turboyolo demo

# The tests, in two tiers (tests/conftest.py says how a test picks one; README.md "Tests"):
#   make test      every promise at least once, through the command: one Darknet scene against the binary,
#                  one browser run, one DDP run, the README's commands, every fault (tests marked `full`,
#                  each naming the test here that covers its promise, left out); about 4 minutes on 2 cores
#   make test-all  everything: every Darknet scene, every OpenCV reference network, each checkpoint writer
#                  in each fault, every parametrization (.ci/run runs it); about twice as long
# Both run on every core (pytest-xdist) and print the slowest tests; PYTEST_ARGS=... passes arguments on.
PYTEST_RUN = $(PY) -m pytest -n auto --maxprocesses 8 --dist worksteal --durations 15

test: $(VENV)/.installed
	$(PYTEST_RUN) -m "not full" $(PYTEST_ARGS)

test-all: $(VENV)/.installed
	$(PYTEST_RUN) $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests bench

# ultralytics in its own venv, for bench/vs_ultralytics.py (the data-path side-by-side); its version is
# the one docs/PERFORMANCE.md quotes
ULTRA_VENV ?= .venv-ultralytics
ULTRA_PINS ?= ultralytics==8.4.190

$(ULTRA_VENV)/.installed:
	test -x $(ULTRA_VENV)/bin/python || $(PYTHON) -m venv $(ULTRA_VENV)
	$(ULTRA_VENV)/bin/python -m pip install -q $(TORCH_PINS) $(ULTRA_PINS)
	touch $@

bench-ultralytics: $(VENV)/.installed $(ULTRA_VENV)/.installed
	$(PY) bench/vs_ultralytics.py --ultra-python $(ULTRA_VENV)/bin/python $(BENCH_ARGS)

clean:
	rm -rf runs build *.egg-info
