#!/usr/bin/env bash
# Installs the pinned agent programs once into a cache outside the repo and reuses it
# (docs/roster.md "Testing against real agents"). Prints one "<pkg>@<version> <prefix>" line each.
set -euo pipefail
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/flowd-test/agents"
PKGS=(
  "@agentclientprotocol/claude-agent-acp@0.101.0"
  "@agentclientprotocol/codex-acp@2.6.0"
  "@google/gemini-cli@0.61.0"
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
)
command -v npm >/dev/null || { echo "install_agents: npm is missing; install node >= 20 and npm" >&2; exit 2; }
mkdir -p "$CACHE"
for spec in "${PKGS[@]}"; do
  dir="$CACHE/${spec//\//+}"
  if [ ! -f "$dir/.installed" ]; then
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "$spec" >&2
    touch "$tmp/.installed"
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
  echo "$spec $dir"
done
