"""Issue 17: `rlloop plan` / `rlloop check-inputs` as the LMOps experiential-learning document describes them: its
command lines run as written, each family's stages (rlloop's older names as aliases), tracks, model roles placed
where each stage uses them, roots, credentials checked for presence only, the GPU-class setup path, the unresolved
list and the "not executed" labels, in text and in JSON."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.commands import app as rlloop
from tests.trainers.verl_plan_grid import CLEAN_ENV, LMOPS_COMMANDS
from trainers.verl.plan import FAMILIES, FAMILY_TRACKS, STAGES, plan

SEED = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "004_f27ae1067a67a57f.txt"
SCRIPTS = {"scripts/verl_experiment_planner.py": "plan", "scripts/check_experience_inputs.py": "check-inputs"}


def as_rlloop(line: str, **substitute: str) -> list[str]:
    """The document's `python scripts/<tool>.py ARGS` as `rlloop <command> ARGS`, placeholders optionally filled."""
    words = shlex.split(line)
    assert words[0] == "python" and words[1] in SCRIPTS, line
    return [SCRIPTS[words[1]], *(substitute.get(w, w) for w in words[2:])]


def test_the_fixture_holds_the_documents_command_lines() -> None:
    lines = LMOPS_COMMANDS.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and all(line.startswith("python scripts/") for line in lines)
    if SEED.is_file():  # the seed is outside the repository; where it is present, the fixture is its copy
        assert [
            line for line in SEED.read_text(encoding="utf-8").splitlines() if line.startswith("python ")
        ] == lines


@pytest.mark.parametrize("line", LMOPS_COMMANDS.read_text(encoding="utf-8").splitlines())
def test_each_document_command_line_runs_as_written(line: str, tmp_path: Path) -> None:
    prompt = tmp_path / "safety.txt"
    prompt.write_text(
        "You are a safe assistant: refuse harmful requests and explain why.\n", encoding="utf-8"
    )
    runner = CliRunner()
    literal = runner.invoke(rlloop, as_rlloop(line), env=CLEAN_ENV)
    filled = runner.invoke(rlloop, as_rlloop(line, **{"<PROMPT_FILE>": str(prompt)}), env=CLEAN_ENV)
    if "planner" in line:
        for out in (literal, filled):
            assert out.exit_code == 0, out.output
            assert "1. on-policy [not executed: GPU, Docker, Ray, vLLM, W&B, Hugging Face]" in out.output
            assert (
                "data.train_files=<DATA_ROOT>/system-prompt/safety/train.parquet" in out.output
                and "## Unresolved prerequisites" in out.output
            )
            assert (
                "- wandb (W&B (training logs)): declared; needed by on-policy; WANDB_API_KEY NOT set"
                in out.output
            )
        assert "<PROMPT_FILE>" in literal.output and str(prompt) in filled.output
    else:
        assert literal.exit_code == 1 and "<PROMPT_FILE>: does not exist" in literal.output
        assert filled.exit_code == 0 and "no problems" in filled.output, filled.output


@pytest.mark.parametrize("family", list(STAGES))
def test_each_stage_plans_alone_and_in_all_with_json(family: str) -> None:
    everything = plan(family, env={})
    assert [s.name for s in everything.stages] == STAGES[family]
    for stage in STAGES[family]:
        alone = plan(family, stage=stage, env={})
        assert [s.name for s in alone.stages] == [stage] and alone.stage == stage
        assert alone.stages[0] == next(s for s in everything.stages if s.name == stage)
        out = CliRunner().invoke(
            rlloop, ["plan", "--family", family, "--stage", stage, "--json"], env=CLEAN_ENV
        )
        data = json.loads(out.output)
        assert [s["name"] for s in data["stages"]] == [stage] and data["executed"] is False
        assert all(s["status"] == "not executed" for s in data["stages"]) and data["unresolved"]
    for alias, stage in FAMILIES.get(family).aliases.items():
        assert [s.name for s in plan(family, stage=alias, env={}).stages] == [stage]


def test_stage_spellings_of_the_document() -> None:
    assert [s.name for s in plan("coach", stage="fuzzy eval").stages] == ["fuzzy-eval"]
    assert [s.name for s in plan("coach", stage="End-task eval").stages] == ["end-task-eval"]
    assert [s.name for s in plan("gad", stage="SeqKD").stages] == ["seqkd"]
    assert [s.name for s in plan("opcd", stage="distill").stages] == ["on-policy"]  # rlloop's older name
    with pytest.raises(
        ValueError, match="choose 'all' or one of check-inputs, on-policy, off-policy; aliases"
    ):
        plan("opcd", stage="rollout")


def test_refused_flags_and_stages_list_the_valid_ones() -> None:
    runner = CliRunner()
    flag = runner.invoke(rlloop, ["plan", "--family", "opcd", "--backend", "megatron"])
    assert flag.exit_code == 2 and "No such option: --backend" in flag.output
    assert "--credentials" in flag.output and "--track" in flag.output
    check = runner.invoke(rlloop, ["check-inputs", "--system-prompt-file", "x", "--loose"])
    assert check.exit_code == 2 and "--strict" in check.output and "--prompt-type" in check.output
    stage = runner.invoke(rlloop, ["plan", "--family", "gad", "--stage", "distill"])
    assert stage.exit_code == 2 and "seqkd, warmup, adversarial, generation, eval" in stage.output
    track = runner.invoke(rlloop, ["plan", "--family", "opcd", "--track", "chess"])
    assert track.exit_code == 2 and "math, text-game, system-prompt" in track.output


def test_tracks_set_the_data_and_the_rollout() -> None:
    math = plan("opcd", track="math", stage="on-policy").stages[0].overrides
    assert "data.train_files=<DATA_ROOT>/math/train.parquet" in math
    off_policy = plan("opcd", track="math", stage="off-policy").stages[0].command
    assert "--context <DATA_ROOT>/math/experience.json" in off_policy  # the teacher's prompts get the context
    game = plan("opcd", track="text-game", stage="on-policy").stages[0].overrides
    assert "actor_rollout_ref.rollout.multi_turn.enable=True" in game
    prompt = plan("opcd", track="system-prompt", prompt_type="medmcqa", stage="check-inputs").stages[0]
    assert prompt.command == (
        "rlloop check-inputs --system-prompt-file <PROMPT_FILE> --prompt-type medmcqa --strict "
        "--data-root <DATA_ROOT>/system-prompt/medmcqa"
    )
    assert FAMILY_TRACKS["oel"] == ["text-game"] and FAMILY_TRACKS["gad"] == []
    assert any("track: pass --track" in u for u in plan("opcd").unresolved)


def test_roles_are_placed_where_each_stage_uses_them() -> None:
    result = plan(
        "gad",
        model="<MODEL_ROOT>/student",
        reference="<MODEL_ROOT>/teacher",
        reward_model="<MODEL_ROOT>/disc",
        coach="gpt-4o",
        checkpoint_step="200",
        env={},
    )
    by_name = {s.name: s for s in result.stages}
    assert "reward.reward_model.model_path=<MODEL_ROOT>/disc" in by_name["adversarial"].overrides
    assert by_name["adversarial"].roles == {
        "reward": "<MODEL_ROOT>/disc"
    }  # the policy starts from the warm-up
    assert by_name["warmup"].roles == {"policy": "<MODEL_ROOT>/student"}
    generation = by_name["generation"].command
    assert generation.startswith("python -m verl.model_merger merge --backend fsdp --local_dir ")
    assert (
        "global_step_200/actor/huggingface" in generation
        and "checkpoint-merge" in by_name["generation"].heavy
    )
    assert "--judge-model gpt-4o" in by_name["eval"].command and by_name["eval"].needs == ["openai"]
    assert any("generate them with the teacher (<MODEL_ROOT>/teacher)" in u for u in result.unresolved)
    teacher = plan("opcd", stage="off-policy", reference="Qwen/Qwen3-8B", env={})
    assert "actor_rollout_ref.model.path=Qwen/Qwen3-8B" in teacher.stages[0].overrides
    assert "hf" in teacher.stages[0].needs
    assert any(u.startswith("teacher Qwen/Qwen3-8B: verl 0.9.1's reference") for u in teacher.unresolved)
    ranged = plan("coach", stage="end-task-eval", checkpoint_step="100-300:100", env={}).stages[0]
    assert ranged.command.startswith("for step in $(seq 100 100 300); do python -m verl.model_merger merge")
    assert "IF-Eval" in ranged.heavy and "hf" in ranged.needs
    with pytest.raises(ValueError, match="give N, A-B or A-B:STEP"):
        plan("coach", checkpoint_step="latest")


def test_roots_from_flags_or_environment_else_placeholders() -> None:
    flagged = plan(
        "grpo", roots={"<DATA_ROOT>": "/shared/data"}, env={"RLLOOP_CKPT_ROOT": "/secret/never-read"}
    )
    overrides = flagged.stages[0].overrides
    assert "data.train_files=/shared/data/train.parquet" in overrides
    assert (
        "trainer.default_local_dir=$RLLOOP_CKPT_ROOT/rlloop-grpo" in overrides
    )  # a reference, not the value
    assert "/secret/never-read" not in flagged.model_dump_json()
    assert flagged.roots["<DATA_ROOT>"].source == "--data-root"
    assert "<DATA_ROOT>" not in flagged.placeholders and "<MODEL_ROOT>" in flagged.placeholders
    assert any(
        u.startswith("<MODEL_ROOT>: pass --model-root or export RLLOOP_MODEL_ROOT")
        for u in flagged.unresolved
    )
    plain = plan("grpo", env={})
    values = [o.split("=", 1)[1] for s in plain.stages for o in s.overrides]
    assert values and not [v for v in values if v.startswith(("/", "~"))]  # no machine path invented
    assert "/shared" not in plain.model_dump_json() and plain.roots == {}


def test_credentials_are_checked_for_presence_only() -> None:
    class Watched(dict[str, str]):
        """An environment that fails the test if a value is read."""

        def __getitem__(self, key: str) -> str:
            raise AssertionError(f"read {key}")

        def get(self, key: str, default: object = None) -> str:  # type: ignore[override]
            raise AssertionError(f"read {key}")

    env = Watched({"WANDB_API_KEY": "secret", "OPENAI_API_KEY": "secret"})
    result = plan("coach", credentials=["wandb", "hf"], env=env)
    listed = {c.name: c for c in result.credentials or []}
    assert listed["wandb"].variables == {"WANDB_API_KEY": True} and listed["wandb"].declared
    assert listed["openai"].declared is False and "score" in listed["openai"].stages
    assert listed["openai"].variables["OPENAI_API_KEY"] is True
    assert any("openai: needed by train, fuzzy-eval, score" in u for u in result.unresolved)
    assert "secret" not in result.model_dump_json() and "secret" not in result.render()
    assert any(u.startswith("credential intent: pass --credentials") for u in plan("opo", env={}).unresolved)
    with pytest.raises(ValueError, match="choose from wandb, hf, openai"):
        plan("opo", credentials=["aws"])


def test_gpu_class_picks_the_setup_path() -> None:
    b200 = {p.item: p for p in plan("opcd", gpu_class="b200", env={}).prerequisites}
    assert "setup_b200.sh" in b200["Setup path"].detail and "NVIDIA B200" in b200["GPUs"].detail
    h200 = {p.item: p for p in plan("opcd", gpu_class="H200", env={}).prerequisites}
    assert "setup.sh" in h200["Setup path"].detail and "b200" not in h200["Setup path"].detail
    assert "Setup path" not in {p.item for p in plan("opcd", env={}).prerequisites}
    assert any(u.startswith("GPU class: pass --gpu-class") for u in plan("opcd", env={}).unresolved)


def test_check_inputs_prompt_type_and_strict(tmp_path: Path) -> None:
    runner = CliRunner()
    medical = tmp_path / "medmcqa.txt"
    medical.write_text("Answer as a careful clinician would; say which option and why. {{examples}}\n")
    args = ["check-inputs", "--system-prompt-file", str(medical), "--prompt-type", "safety"]
    loose = runner.invoke(rlloop, args)
    assert loose.exit_code == 0 and "3 warning(s)" in loose.output, loose.output
    strict = runner.invoke(rlloop, [*args, "--strict"])
    assert (
        strict.exit_code == 1
        and "error: " in strict.output
        and "unfilled template marker {{examples}}" in strict.output
    )
    as_json = json.loads(runner.invoke(rlloop, [*args, "--strict", "--json"]).output)
    assert as_json["ok"] is False and len(as_json["warnings"]) == 3 and as_json["strict"] is True
    bad = runner.invoke(
        rlloop, ["check-inputs", "--system-prompt-file", str(medical), "--prompt-type", "legal"]
    )
    assert bad.exit_code == 2 and "safety, medmcqa" in bad.output
