#!/usr/bin/env bash
# The extension's checks, as `make vscode-test` runs them:
#   cd editors/vscode && FLOWD_BIN=/abs/path/to/flowd ./scripts/test.sh
# Installs node_modules when missing or stale, regenerates the plan schema, src/protocol.ts and the Neovim plugin's protocol.lua from flowd, then
# typecheck, lint, build and the node --test suite, including the wire tests against the real
# `flowd serve` at FLOWD_BIN (FLOWD_WIRE=0 opts out of those).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/daemons.sh

if ! node scripts/deps-fresh.mjs; then
  echo "== npm ci (node_modules missing or stale)"
  npm ci --no-audit --no-fund --loglevel=error
fi

echo "== schema"
node scripts/schema.mjs
echo "== protocol"
node scripts/protocol.mjs
echo "== typecheck"
npm run --silent typecheck
echo "== lint"
npm run --silent lint
echo "== build"
npm run --silent build
echo "== test"
npm run --silent test
