# Both entry points bootstrap their own environment: a fresh clone needs only python3 (>= 3.11),
# git, and (for the editor extension) node + npm.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest vscode-test test-e2e bench clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/flowd demo

lint: $(STAMP)
	$(BIN)/ruff check flowd tests bench
	$(BIN)/ruff format --check flowd tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest

vscode-test: $(STAMP)
	@if [ -f editors/vscode/package.json ]; then \
	  cd editors/vscode && FLOWD_BIN=$(CURDIR)/$(BIN)/flowd ./scripts/test.sh; \
	else echo "editors/vscode: no package.json yet"; fi

# The extension in a real VS Code (code-server + Debian's chromium, installed on first use and
# cached under ${XDG_CACHE_HOME:-$HOME/.cache}/flowd-test): launch, live tree, Problems, cost,
# cancel, resume; screenshots in editors/vscode/out/e2e/screenshots.
test-e2e: $(STAMP)
	cd editors/vscode && FLOWD_BIN=$(CURDIR)/$(BIN)/flowd ./scripts/e2e.sh

test: lint typecheck pytest vscode-test test-e2e

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
