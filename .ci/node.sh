#!/usr/bin/env bash
# npm for the agent image's coding agents (Claude Code, Codex, OpenCode come from the npm registry through the host's
# npm: sandbox/agent_clis.py). Installs Debian's nodejs and npm when npm is missing; idempotent, for root on CI.
set -euo pipefail
if command -v npm >/dev/null 2>&1; then
  echo "[node.sh] npm $(npm --version) already here; nothing to do"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "[node.sh] error: npm missing and not root: install Node.js and npm" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "[node.sh] error: apt-get update failed" >&2; exit 1; }
apt-get install -y -qq nodejs npm >/dev/null || { echo "[node.sh] error: apt-get install nodejs npm failed" >&2; exit 1; }
echo "[node.sh] npm $(npm --version) installed"
