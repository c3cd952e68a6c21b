"""How the images are assembled on the host (no Docker needed): the wheelhouse's pins, the coding agents' tar."""

from __future__ import annotations

from pathlib import Path


def test_the_coding_agents_tar_links_identical_binaries_once(tmp_path: Path) -> None:
    """OpenCode's launcher package carries a copy of its platform binary: packed once, the image is 185 MB
    smaller. Files that differ, small files and links stay as they are."""
    from sandbox.agent_clis import _link_duplicates, agent_clis_pins

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


def test_the_wheelhouse_pins_what_this_host_installed_without_resolving() -> None:
    """The image gets this host's resolved set, read from the installed metadata (a package index whose newest
    metadata disagrees with an older pin once failed the image build with ResolutionImpossible)."""
    import importlib.metadata

    from sandbox.wheelhouse import host_closure

    transformers = importlib.metadata.version("transformers")
    closure, missing = host_closure([f"transformers=={transformers}", "no-such-package-rlloop==1.0"])
    pins = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1] for line in closure}
    assert pins["transformers"] == transformers
    for dependency in (
        "huggingface-hub",
        "tokenizers",
        "safetensors",
        "numpy",
    ):  # transformers' own requirements
        assert pins[dependency] == importlib.metadata.version(dependency).split("+")[0], dependency
    assert "torch" not in pins  # an extra nobody asked for is not followed
    assert missing == ["no-such-package-rlloop==1.0"]


def test_a_failed_download_says_what_pip_said_without_its_index_noise() -> None:
    import subprocess

    from sandbox.wheelhouse import _pip_failure

    noise = "".join(
        f"WARNING: Location 'file:///x/{i}/' is ignored: it is neither a file nor a directory.\n"
        for i in range(60)
    )
    result = subprocess.CompletedProcess(
        [], 1, "", "The conflict is caused by: a 1 depends on b>2\n" + noise + "ERROR: ResolutionImpossible\n"
    )
    message = str(_pip_failure("pip download", result))
    assert (
        "The conflict is caused by" in message
        and "ResolutionImpossible" in message
        and "is ignored" not in message
    )
