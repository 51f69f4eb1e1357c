#!/usr/bin/env bash
# The test setup for the dashboard's browser tests: they drive Debian's Chromium (/usr/bin/chromium)
# through Playwright (a PyPI package; no browser is downloaded). When `chromium` is missing and we are
# root on Debian, the `chromium` package is installed from Debian's archive; otherwise say so (the
# browser tests then fail, they are never skipped).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "test setup: installing Debian's chromium for the dashboard's browser tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
    echo "test setup: warning: no chromium on PATH and no root apt-get to install it; the browser tests will fail" >&2
fi
