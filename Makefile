# Two commands: `make demo` and `make test`. Each bootstraps .venv from PyPI first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint bootstrap core clean

bootstrap: $(STAMP)

# make test also installs the optional extras the tests use (Ray, aoizora[ray]).
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	touch $(TEST_STAMP)

# setup.py builds the compiled event core (sim/_flowcore.c): a changed C source
# re-runs the install, which recompiles it. Without a C compiler the install
# still succeeds (the pure-Python core runs); CORE_STATUS prints one line
# saying which core runs, and `make core` retries the build.
CORE_STATUS = $(BIN)/python -c 'from sim.engine import core_status; print(core_status())'

$(STAMP): pyproject.toml setup.py $(wildcard sim/_flow*.c sim/_flow*.h)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required, found " + sys.version.split()[0] + "; set PYTHON=python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@$(CORE_STATUS)
	touch $(STAMP)

core: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@$(CORE_STATUS)

demo: $(STAMP)
	$(BIN)/python -m aoizora.demo

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# One test process per core (CI has 2): a module's tests stay in one process
# (--dist loadscope), so a module-scoped fixture compiles once; the processes share
# one compile cache (tests/aoizora/conftest.py). PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 2

test: lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
