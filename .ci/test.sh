#!/usr/bin/env bash
# `make test`: everything the suite needs, then the suite. What does not depend on rlloop's venv installs beside it
# in the background (Docker's engine and Chromium from Debian's packages, vLLM's own venv), so a fresh machine waits
# for the slowest of them, not for their sum. Each background step logs to .test-logs/<step>.log; a step that fails
# prints its last lines and fails the run. The exit status is the suite's (or the first setup step's that failed).
set -euo pipefail
cd "$(dirname "$0")/.."

MAKE="${MAKE:-make}"
VENV="${VENV:-.venv}"
VLLM_VENV="${VLLM_VENV:-.venv-vllm}"
LOGS=.test-logs
mkdir -p "$LOGS"
started=$(date +%s)

step() { echo "[make test +$(( $(date +%s) - started ))s] $*"; }
declare -A PIDS=()
background() {  # NAME COMMAND...: run COMMAND in the background, its output in $LOGS/NAME.log
  local name=$1
  shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  PIDS[$name]=$!
  step "started $name in the background (log: $LOGS/$name.log)"
}
await() {  # NAME: wait for a background step; fail with its log's last lines if it failed
  local name=$1
  if ! wait "${PIDS[$name]}"; then
    echo "error: $name failed; the last lines of $LOGS/$name.log:" >&2
    tail -n 30 "$LOGS/$name.log" >&2
    exit 1
  fi
  unset "PIDS[$name]"
  step "$name ready"
}
stop_background() {  # nothing outlives a failed or interrupted run
  local pid
  for pid in "${PIDS[@]}"; do
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
  done
}
trap stop_background EXIT

background system bash -c "bash .ci/docker.sh && bash .ci/chromium.sh && bash .ci/node.sh"
# vLLM's venv, then its tests, niced: they run on what the suite leaves idle (its tail) instead of after it
background vllm bash -c "'$MAKE' --no-print-directory '$VLLM_VENV/.installed' && nice -n 10 '$MAKE' --no-print-directory test-vllm"
step "installing rlloop's venv"
"$MAKE" --no-print-directory "$VENV/.installed-dev" "$VENV/.installed-verl"
await system
# The images build while the suite starts: only the Docker tests need them, and they wait for this build's status
# file (tests/sandbox/docker_support.py), failing with its log if the build failed.
IMAGES_STATUS="$PWD/$LOGS/images.status"
rm -f "$IMAGES_STATUS"
build_images() {
  local built=0
  "$VENV/bin/rlloop" sandbox build --agent || built=$?
  echo "$built" >"$IMAGES_STATUS.tmp" && mv "$IMAGES_STATUS.tmp" "$IMAGES_STATUS"
  return "$built"
}
background images build_images
step "running the suite"
status=0
# Two workers (pytest-xdist), each test file on one of them (--dist loadscope: a file's module fixtures are made once);
# what every file needs (tiny-arith, tiny-chat) is built once for both (tests/conftest.py). Files go out longest first
# by the seconds they took last time (tests/durations.json; this run's figures land in $LOGS/durations.json), not by
# xdist's count of tests (tests/support/schedule.py).
RLLOOP_TEST_IMAGES_STATUS="$IMAGES_STATUS" RLLOOP_TEST_DURATIONS_OUT="$LOGS/durations.json" RLLOOP_VERL_SITE="$VENV/verl-site" \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider --timeout=1800 \
  -n "${TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder --durations=25 || status=$?
if wait "${PIDS[images]}"; then
  step "the images were built (log: $LOGS/images.log)"
else
  echo "error: building the images failed; the last lines of $LOGS/images.log:" >&2
  tail -n 30 "$LOGS/images.log" >&2
  status=$((status ? status : 1))
fi
unset "PIDS[images]"
step "waiting for vLLM's venv and tests (log: $LOGS/vllm.log)"
if wait "${PIDS[vllm]}"; then
  tail -n 3 "$LOGS/vllm.log"
else
  vllm_status=$?
  echo "error: the vLLM tests failed; the last lines of $LOGS/vllm.log:" >&2
  tail -n 40 "$LOGS/vllm.log" >&2
  status=$((status ? status : vllm_status))
fi
unset "PIDS[vllm]"
step "done (exit status $status)"
exit "$status"
