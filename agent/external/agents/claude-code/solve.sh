#!/bin/bash
# Claude Code, unchanged, launched as PostTrainBench's agents/claude/solve.sh launches it. Its model is reached
# through rlloop's gateway: ANTHROPIC_BASE_URL and a placeholder ANTHROPIC_API_KEY are set by rlloop, AGENT_CONFIG
# is the first of --agent-llm-models.
unset GEMINI_API_KEY CODEX_API_KEY
command -v claude >/dev/null || {
  echo "claude: command not found: Claude Code ships in the agent image (rlloop sandbox build --agent; --sandbox docker)" >&2
  exit 127
}
export BASH_MAX_TIMEOUT_MS="36000000"
# Every model role on the run's model, so side calls (titles, summaries, sub-agents) pass the gateway's allowlist.
export ANTHROPIC_MODEL="$AGENT_CONFIG" ANTHROPIC_SMALL_FAST_MODEL="$AGENT_CONFIG" CLAUDE_CODE_SUBAGENT_MODEL="$AGENT_CONFIG"
export ANTHROPIC_DEFAULT_HAIKU_MODEL="$AGENT_CONFIG" ANTHROPIC_DEFAULT_SONNET_MODEL="$AGENT_CONFIG"
export ANTHROPIC_DEFAULT_OPUS_MODEL="$AGENT_CONFIG"
# No update checks, telemetry or error reports: the sandbox reaches no host but the relay.
export DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1

claude --print --verbose --model "$AGENT_CONFIG" --output-format stream-json \
    --dangerously-skip-permissions "$PROMPT"
