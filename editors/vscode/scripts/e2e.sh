#!/usr/bin/env bash
# The real-editor end-to-end test, as `make test-e2e` runs it:
#   cd editors/vscode && FLOWD_BIN=/abs/path/to/flowd ./scripts/e2e.sh
# Installs code-server and chromium on first use (scripts/e2e-install.sh, cached outside the
# repository), packages the extension (.vsix), and runs test/e2e/run.ts: code-server with the
# .vsix installed, driven in chromium over CDP. Screenshots go to out/e2e/screenshots.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/daemons.sh
: "${FLOWD_BIN:?set FLOWD_BIN to the flowd executable (make test-e2e does)}"

if ! node scripts/deps-fresh.mjs; then
  echo "== npm ci (node_modules missing or stale)"
  npm ci --no-audit --no-fund --loglevel=error
fi

echo "== code-server and chromium"
entry="$(./scripts/e2e-install.sh | tail -n 1)"
# Neovim 0.11 for the dual journey (both editors on one daemon): $FLOWD_NVIM, else the plugin's own
# script installs it on first use (cached outside the repository, as `make test-nvim` does).
if [ -z "${FLOWD_NVIM:-}" ]; then
  FLOWD_NVIM="$(PYTHON="$(dirname "$FLOWD_BIN")/python" sh ../nvim/scripts/ensure-nvim.sh | tail -n 1)"
fi
export FLOWD_NVIM
echo "== package"
npm run --silent package >/dev/null
echo "== e2e"
node scripts/build.mjs --e2e
# One journey at a time (each starts its own code-server and chromium); run.js first, since it
# clears the screenshot directory (approve.js and dual.js keep their own under approve/ and dual/).
for journey in run approve dual; do
  CODE_SERVER_ENTRY="$entry" VSIX="$PWD/dist/flowd.vsix" SHOTS="$PWD/out/e2e/screenshots" \
    node --test --test-reporter=spec "out/e2e/$journey.js"
done
