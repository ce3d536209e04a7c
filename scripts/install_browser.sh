#!/bin/sh
# The browser the web UI's tests drive: Debian's chromium, used by Playwright
# through `executable_path` (never `playwright install`, which downloads a build
# of its own). Idempotent and quiet when it is there already. Without root or
# apt it says so and exits 0: those tests then skip with the reason.
set -eu

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser.sh: chromium is missing and cannot be installed here (needs root and apt-get);" \
        "the web UI's browser tests will be skipped" >&2
    exit 0
fi
echo "install_browser.sh: installing Debian's chromium for the web UI's browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1
