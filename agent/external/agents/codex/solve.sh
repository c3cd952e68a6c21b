#!/bin/bash
# Codex CLI, unchanged, launched as PostTrainBench's agents/codex/solve.sh launches it (less `--search`: the hosted
# web search would give the agent the internet through the provider). Codex takes its provider from its own
# config, not from OPENAI_BASE_URL: config.toml points it at rlloop's gateway (OPENAI_BASE_URL and the placeholder
# OPENAI_API_KEY set by rlloop; AGENT_CONFIG is the first of --agent-llm-models).
unset ANTHROPIC_API_KEY GEMINI_API_KEY
command -v codex >/dev/null || {
  echo "codex: command not found: Codex CLI ships in the agent image (rlloop sandbox build --agent; --sandbox docker)" >&2
  exit 127
}
# Not under /tmp: Codex refuses to make its helper commands (apply_patch) under a temporary folder.
export CODEX_HOME="$PWD/.codex"
mkdir -p "$CODEX_HOME"
cat > "$CODEX_HOME/config.toml" <<TOML
model_provider = "rlloop"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[model_providers.rlloop]
name = "rlloop gateway"
base_url = "$OPENAI_BASE_URL"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
supports_websockets = false
TOML
echo codex
echo $OPENAI_API_KEY

codex exec --json -c model_reasoning_summary=detailed --skip-git-repo-check --yolo --model "$AGENT_CONFIG" "$PROMPT"
