#!/usr/bin/env bash
# Make a headless Chromium available for the service's web-page tests (tests/agent/service/test_page.py and
# test_run_page.py): install Debian's `chromium` with apt-get when no chromium binary is on PATH. Idempotent; meant
# for root on a fresh CI machine. Prints the binary it found or installed.
set -euo pipefail

say() { echo "[chromium.sh] $*"; }
die() { echo "[chromium.sh] error: $*" >&2; exit 1; }

find_chromium() {
  for name in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

if bin="$(find_chromium)"; then
  say "chromium already installed: $bin"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  die "chromium is missing and this is not root: install the Debian package 'chromium' yourself (apt-get install chromium)"
fi
command -v apt-get >/dev/null 2>&1 || die "chromium is missing and apt-get is not available: install Chromium by hand"

say "installing chromium with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || die "apt-get update failed: check the network or the Debian mirror"
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null \
  || die "apt-get install chromium failed"

bin="$(find_chromium)" || die "apt-get installed chromium but no chromium binary is on PATH"
say "installed: $bin ($("$bin" --version 2>/dev/null || echo 'version unknown'))"
