"""How the images are assembled on the host (no Docker needed): the coding agents' tar."""

from __future__ import annotations

from pathlib import Path


def test_the_coding_agents_tar_links_identical_binaries_once(tmp_path: Path) -> None:
    """OpenCode's launcher package carries a copy of its platform binary: packed once, the image is 185 MB
    smaller. Files that differ, small files and links stay as they are."""
    from sandbox.images import _link_duplicates, agent_clis_pins

    tree = tmp_path / "node_modules"
    (tree / "opencode-ai" / "bin").mkdir(parents=True)
    (tree / "opencode-linux-x64" / "bin").mkdir(parents=True)
    binary = bytes(range(256)) * 8192  # 2 MiB
    (tree / "opencode-ai" / "bin" / "opencode.exe").write_bytes(binary)
    (tree / "opencode-linux-x64" / "bin" / "opencode").write_bytes(binary)
    (tree / "other.bin").write_bytes(binary[::-1])
    (tree / "small.js").write_text("x")
    (tree / "small-copy.js").write_text("x")
    _link_duplicates(tree)
    first, second = (
        tree / "opencode-ai" / "bin" / "opencode.exe",
        tree / "opencode-linux-x64" / "bin" / "opencode",
    )
    assert first.samefile(second) and first.read_bytes() == binary
    assert not (tree / "other.bin").samefile(first)
    assert not (tree / "small.js").samefile(tree / "small-copy.js")
    pins = agent_clis_pins()
    assert "@anthropic-ai/claude-code@" in pins and "@openai/codex@" in pins and "opencode-ai@" in pins
