# Sourced by test.sh and e2e.sh: the `flowd serve` processes these suites start connect to a
# repository's daemon (docs/editors.md "The daemon"), which outlives them by design. The suites
# give flowd a runtime directory of their own and stop every daemon found there when they end, so
# a run leaves no process behind and never joins a daemon of the user's. Their temp dir is in it
# too: code-server's IPC sockets and a killed chromium's singleton dir go with it, not into /tmp
# (where every confined lane's start would look through them for the user's sockets).
FLOWD_TEST_RUNTIME="$(mktemp -d "${TMPDIR:-/tmp}/flowd-editor-test.XXXXXX")"
export XDG_RUNTIME_DIR="$FLOWD_TEST_RUNTIME"
mkdir "$FLOWD_TEST_RUNTIME/tmp"
export TMPDIR="$FLOWD_TEST_RUNTIME/tmp"

stop_test_daemons() {
  node -e '
    const fs = require("fs"), path = require("path");
    const dir = path.join(process.argv[1], "flowd");
    let names = [];
    try { names = fs.readdirSync(dir); } catch { process.exit(0); }
    for (const name of names.filter((n) => /^daemon-.*\.json$/.test(n))) {
      try {
        const { pid } = JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
        process.kill(pid, "SIGTERM");
      } catch {}
    }
  ' "$FLOWD_TEST_RUNTIME"
  rm -rf "$FLOWD_TEST_RUNTIME"
}
trap stop_test_daemons EXIT
