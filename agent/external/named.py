"""The coding agents people run on PostTrainBench and AutoRL-Bench, by name: `rlloop bench --agents
claude-code,codex,opencode`.

Each is a PostTrainBench agent folder shipped with rlloop (`agent/external/agents/<name>/solve.sh`): the CLI,
unchanged, launched with the command line PostTrainBench's own solve.sh uses, its provider pointed at rlloop's
gateway. The CLIs themselves ship in the agent image (`sandbox.agent_clis.AGENT_CLIS`). A name is accepted wherever an
agent folder is (the CLI's `--agents`, a sweep spec's `agents`), and a folder of that name in the working directory
does not shadow it: `./claude-code` names the folder.
"""

from __future__ import annotations

from pathlib import Path

AGENTS_DIR = Path(__file__).parent / "agents"
# name -> (the command it runs, the API it speaks to the gateway)
NAMED_AGENTS: dict[str, tuple[str, str]] = {
    "claude-code": ("claude", "Anthropic Messages (/v1/messages)"),
    "codex": ("codex", "OpenAI Responses (/v1/responses)"),
    "opencode": ("opencode", "OpenAI Chat Completions (/v1/chat/completions)"),
}


def is_named(value: str | Path) -> bool:
    """True for `claude-code`, `codex`, `opencode` as written (`./codex` is a folder, not a name)."""
    return isinstance(value, str) and value in NAMED_AGENTS


def resolve(value: str | Path) -> Path:
    """The folder a name stands for, or `value` itself as a path."""
    if is_named(value):
        return AGENTS_DIR / str(value)
    return Path(value).expanduser()


def is_named_folder(folder: Path) -> bool:
    """True for one of the shipped folders (its runs need a model: `--agent-llm-models`)."""
    return folder.resolve().parent == AGENTS_DIR.resolve() and folder.name in NAMED_AGENTS
