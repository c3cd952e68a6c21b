"""A user's model folder is checked on the host before the baseline: a weights file the trials' user cannot read, a
link out of the folder, missing weights or shards, a quantized or unknown config, no tokenizer, no chat template under
chat prompts. Each is refused with the file and the fix; a folder that will work passes untouched.

The folder is a real one: a tiny llama written as GGUF and converted (tests/support/tiny_gguf.py), with its
tokenizer and chat template. The last test runs `rlloop run` on a folder whose weights are 0600 and root's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.run.model_check import BaseModelError, base_model_problems, check_base_model, trial_user
from tests.support.tiny_gguf import write_tiny_gguf
from trainers.from_gguf import convert_gguf

REPO = Path(__file__).resolve().parents[3]
# as root, trials run as the sandbox's uid 1000, and root's 0600 files are unreadable to them
AS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def good_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    _, gguf_file = write_tiny_gguf(folder / "tiny.gguf")
    out = convert_gguf(gguf_file, folder / "hf", source={})
    for path in [out, *out.rglob("*")]:  # as a user's tools may leave it: readable by all
        path.chmod(0o755 if path.is_dir() else 0o644)
    return out


@pytest.fixture
def model(good_model: Path, tmp_path: Path) -> Path:
    """A fresh copy of the good folder, for one test to break."""
    copy = tmp_path / "my-model"
    shutil.copytree(good_model, copy)
    return copy


def test_a_folder_that_will_work_passes(model: Path) -> None:
    assert base_model_problems(model, prompt_format="chat") == []
    assert check_base_model(model, prompt_format="chat") == model


@pytest.mark.skipif(
    not AS_ROOT, reason="as another user trials keep the caller's uid and read its 0600 files"
)
def test_a_weights_file_only_root_can_read_is_refused_naming_the_file_and_the_fix(model: Path) -> None:
    (model / "model.safetensors").chmod(0o600)
    with pytest.raises(BaseModelError) as caught:
        check_base_model(model)
    message = str(caught.value)
    assert "trials run as uid 1000 and cannot read model.safetensors (mode 0600, owner root)" in message
    assert f"chmod -R a+rX {model}" in message and "\n" not in message  # one line: the CLI's `error:` line
    (model / "model.safetensors").chmod(0o644)  # the fix it names works
    assert base_model_problems(model) == []


@pytest.mark.skipif(not AS_ROOT, reason="trials run as the caller when it is not root")
def test_a_folder_the_trial_cannot_enter_is_named_as_the_folder_itself(model: Path) -> None:
    model.chmod(0o700)
    (problem,) = base_model_problems(model)
    assert "cannot read the folder itself (mode 0700, owner root)" in problem


def test_the_trial_user_is_the_sandbox_user_under_root_else_the_caller() -> None:
    assert trial_user() == ((1000, 1000) if AS_ROOT else (os.geteuid(), os.getegid()))


def test_a_link_out_of_the_folder_is_refused_without_following_it(model: Path, tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (model / "model.safetensors").rename(blobs / "abc123")
    (model / "model.safetensors").symlink_to("../blobs/abc123")
    (model / "inside.json").symlink_to("config.json")  # a link that stays inside is fine
    (problem,) = base_model_problems(model)
    assert "model.safetensors is a link to ../blobs/abc123, outside the folder" in problem
    assert "cp -rL" in problem


def test_no_weights_and_missing_shards_are_named(model: Path) -> None:
    (model / "model.safetensors").unlink()
    (problem,) = base_model_problems(model)
    assert problem.startswith(f"no weights in {model} (model.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    (problem,) = base_model_problems(model)
    assert "names shards that are not in the folder: model-00001-of-00002.safetensors" in problem


def test_a_quantized_config_or_remote_code_or_unknown_architecture_is_refused(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(
        json.dumps({**config, "quantization_config": {"quant_method": "gguf"}})
    )
    (problem,) = base_model_problems(model)
    assert "config.json has a quantization_config (gguf)" in problem
    (model / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "x.Y"}}))
    (problem,) = base_model_problems(model)
    assert "trust_remote_code" in problem
    (model / "config.json").write_text(json.dumps({**config, "model_type": "my-own-arch"}))
    problems = base_model_problems(model)
    assert any("model_type 'my-own-arch' is not a causal language model" in p for p in problems)
    (model / "config.json").write_text(
        json.dumps({**config, "architectures": ["LlamaForSequenceClassification"]})
    )
    (problem,) = base_model_problems(model)
    assert "hold no causal language model" in problem


def test_no_tokenizer_or_no_chat_template_under_chat_prompts_is_named(model: Path) -> None:
    template = model / "chat_template.jinja"
    assert template.is_file()
    template.unlink()
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    assert base_model_problems(model, prompt_format="plain") == []  # plain prompts need no template
    (problem,) = base_model_problems(model, prompt_format="chat")
    assert problem.startswith("--prompt-format chat needs the model's chat template") and "plain" in problem
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).unlink()
    (problem,) = base_model_problems(model)
    assert (
        problem.startswith(f"no tokenizer transformers can load in {model}") and "save_pretrained" in problem
    )


@pytest.mark.skipif(not AS_ROOT, reason="the refusal is of root's 0600 file, which only a root run has")
def test_rlloop_run_refuses_a_0600_weights_file_before_the_baseline(model: Path, tmp_path: Path) -> None:
    (model / "model.safetensors").chmod(0o600)
    home = tmp_path / "home"
    env = {**os.environ, "RLLOOP_HOME": str(home), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "agent.cli", "run", "--base-model", str(model), "--benchmark", "arith"]
    command += ["--prompt-format", "chat", "--sandbox", "local", "--loop-n", "1", "--run-id", "refused"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert "cannot read model.safetensors (mode 0600, owner root)" in said and "chmod -R a+rX" in said
    assert "baseline" not in said.lower()  # refused before the grader scored anything
    assert not (home / "runs" / "refused" / "grader" / "store.db").exists()
