# The two commands: `make demo` (the main job on the embedded default) and
# `make test` (the test suite). Both create and use the project's virtualenv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
WORKDIR ?= demo_workdir
PYTEST_ARGS ?=

export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: venv demo test test-slow bench clean

$(STAMP): setup.py constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip<27"
	$(PY) -m pip install -q -c constraints.txt -e ".[test,ray]"
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m i2a.demo --workdir=$(WORKDIR)

# pytest exits 5 when nothing is collected: that is a failure here too.
# The suite runs in TEST_WORKERS processes (pytest-xdist), one test file per
# process at a time, so a file's module fixtures are built once; most
# tests keep one core busy (TensorFlow's small ops, binaries started as
# subprocesses), so two processes on 2 cores take 0.55-0.65 of the time
# (646-765 s against 1,175 s here).
# TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile \
		tests $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(WORKDIR) .pytest_cache
