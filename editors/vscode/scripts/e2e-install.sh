#!/usr/bin/env bash
# Installs what the end-to-end test needs, once, outside the repository:
#   - Debian packages: chromium (the browser the test drives), ripgrep (code-server's search
#     binary, instead of the one its postinstall downloads from GitHub) and the headers its
#     native modules build against (apt-get, as root, only when one is missing);
#   - code-server $CODE_SERVER_VERSION from npm into
#     ${XDG_CACHE_HOME:-$HOME/.cache}/flowd-test/code-server-<version>, reused when present.
# code-server's own postinstall downloads ripgrep and prebuilt binaries from the internet; this
# script does its steps by hand (install with scripts off, put Debian's rg where
# @vscode/ripgrep looks, then build the native modules from source against the local node
# headers). Prints the path of the code-server entry point on its last line.
set -euo pipefail

CODE_SERVER_VERSION="${CODE_SERVER_VERSION:-4.100.3}" # the newest code-server that runs on node 20
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/flowd-test"
PREFIX="$CACHE/code-server-$CODE_SERVER_VERSION"
CS="$PREFIX/node_modules/code-server"

log() { echo "e2e-install: $*" >&2; }

need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v rg >/dev/null || need_apt+=(ripgrep)
for pkg in libkrb5-dev libxkbfile-dev libsecret-1-dev build-essential pkg-config python3; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing Debian packages: ${need_apt[*]}; install them (apt-get install ${need_apt[*]}) or run as root"
    exit 1
  fi
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need_apt[@]}" >&2
fi
# `--packages-only`: the Debian packages alone (make pytest's chromium, for the HTML report test).
[ "${1:-}" = "--packages-only" ] && exit 0

if [ -f "$PREFIX/.installed" ]; then
  echo "$CS/out/node/entry.js"
  exit 0
fi

if [ "$(node -p 'process.versions.node.split(".")[0]')" != 20 ]; then
  log "code-server $CODE_SERVER_VERSION needs node 20; this is node $(node --version)"
  exit 1
fi

log "installing code-server $CODE_SERVER_VERSION into $PREFIX (slow, once)"
rm -rf "$PREFIX.tmp"
mkdir -p "$PREFIX.tmp"
# Native modules: build from source (no prebuilt downloads) against the installed node headers.
# npm_config_yes: node-pty's install runs `npx node-gyp`, which would otherwise stop to ask.
export npm_config_build_from_source=true npm_config_unsafe_perm=true npm_config_yes=true
if [ -f /usr/include/node/node.h ]; then export npm_config_nodedir=/usr; fi
npm_i() { npm install --no-audit --no-fund --loglevel=error "$@" >&2; }

cd "$PREFIX.tmp"
echo '{"private": true}' >package.json
npm_i --ignore-scripts "code-server@$CODE_SERVER_VERSION"
cs="$PREFIX.tmp/node_modules/code-server"
# Only the native modules: a plain `npm rebuild` would run code-server's own postinstall too.
npm rebuild --loglevel=error argon2 >&2

cd "$cs/lib/vscode"
npm_i --omit=dev --ignore-scripts
# @vscode/ripgrep's postinstall skips its download when bin/ exists.
mkdir -p node_modules/@vscode/ripgrep/bin
ln -sf "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
npm rebuild --loglevel=error >&2
ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && ln -sfn code-linux.sh code-server)
(cd bin/helpers && ln -sfn browser-linux.sh browser.sh)
cd extensions
npm_i --omit=dev

touch "$PREFIX.tmp/.installed"
rm -rf "$PREFIX"
mv "$PREFIX.tmp" "$PREFIX"
log "installed"
echo "$CS/out/node/entry.js"
