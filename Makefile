# The README's two commands: `make run` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run env test suite setup lint docs docs-serve bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[embedded,dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP)

## make run: web + worker + beat on the embedded PostgreSQL/Redis unless DATABASE_URL/REDIS_URL are set
run: setup
	$(BIN)/python -m dev.devrun

## make env: the running make run's exports, for a second shell: eval $$(make -s env)
env:
	@$(BIN)/python -m dev.devrun env

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy inbox web workers dev bench
	$(BIN)/lint-imports

## the docs site (mkdocs-material, from docs/; the references are generated at build time)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

## the site served with its search, rebuilt on every change (port 8001: make run has 8000)
DOCS_PORT ?= 8001
docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

## make test: lint, type-check, import contracts and the docs beside the whole suite, which
## runs on every core (pytest-xdist; each worker has its own database cloned from a migrated
## template); each part's output is printed when it ends, and any failure fails the target.
## Two test processes per core, at most 8: a process test spends about half its time waiting
## on the servers it started, and a second test on the core fills that time (on 2 cores the
## suite took 269 s with 4, 327 s with 2). Each worker holds its own Redis and a few dozen
## PostgreSQL connections, hence the cap.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min(8, 2 * (os.cpu_count() or 1)))')
test: setup
	$(MAKE) --no-print-directory -j 3 --output-sync=target lint docs suite

## the suite alone. Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: otherwise
## each xdist worker compiles every test module again, and each process a test starts
## (web, celery, the CLI) the whole project.
suite: setup
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

bench: setup
	$(BIN)/python -m bench.ingest --seconds 10 --repeats 5
	$(BIN)/python -m bench.drain --repeats 1
	$(BIN)/python -m bench.deliver

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache site
