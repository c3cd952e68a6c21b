#!/bin/bash
# OpenCode, unchanged, launched as PostTrainBench's agents/opencode/solve.sh launches it: opencode.json in the
# working directory allows every tool and names the provider, here rlloop's gateway through OpenCode's bundled
# OpenAI-compatible provider (Chat Completions; OPENAI_BASE_URL and the placeholder OPENAI_API_KEY set by rlloop,
# AGENT_CONFIG the first of --agent-llm-models).
command -v opencode >/dev/null || {
  echo "opencode: command not found: OpenCode ships in the agent image (rlloop sandbox build --agent; --sandbox docker)" >&2
  exit 127
}
python - <<'PY'
import json, os

model = os.environ["AGENT_CONFIG"]
config = {
    "$schema": "https://opencode.ai/config.json",
    "permission": "allow",
    "autoupdate": False,
    "share": "disabled",
    "provider": {
        "rlloop": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "rlloop gateway",
            "options": {"baseURL": os.environ["OPENAI_BASE_URL"], "apiKey": "{env:OPENAI_API_KEY}"},
            "models": {model: {"name": model}},
        }
    },
}
with open("opencode.json", "w") as out:
    json.dump(config, out, indent=2)
PY
# No update checks, model-list downloads, sharing or plugin installs: the sandbox reaches no host but the relay.
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_SHARE=1
export OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1

opencode run --model "rlloop/$AGENT_CONFIG" --format json "$PROMPT"
