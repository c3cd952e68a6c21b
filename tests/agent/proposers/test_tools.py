"""The LLM researcher's tools: the driver model (a real OpenAI-protocol server, scripted) calls each tool, the calls
are recorded (trials/<id>/proposal_tools.jsonl, the MLflow trace), and its proposal is built on them; a tool error and
a runaway tool loop end cleanly. Scripts run in the real local sandbox; traces go to a real SQLite MLflow store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.llm import LLMClient, LLMSettings, PriceTable, RetryPolicy
from agent.llm.budget import Budget, BudgetLimits
from agent.loop.trials import SandboxScripts
from agent.proposers.failures import failure_clusters
from agent.proposers.llm import LLMProposer, ProposalError
from agent.proposers.recipes import RecipeCatalog
from agent.proposers.tools import TOOLS, ToolEnv, _scripts_off, call_tool, tool_specs
from agent.run.workspace import RunPaths
from agent.tracking.tracker import TRIAL_TAG, Tracker
from sandbox.backends.local import LocalSandbox
from tests.support.openai_server import ScriptedOpenAIServer, call, reply, tool_calls
from trainers.config import TrainerConfig

MODEL = "test-model"
FAST = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.02, max_total_s=10)
VALIDATION = {
    "score": 0.5,
    "n": 4,
    "ci_low": 0.15,
    "ci_high": 0.85,
    "samples": [
        {"id": "v0", "prompt": "2+2=", "expected": "4", "got": "4", "correct": True},
        {"id": "v1", "prompt": "3+5=", "expected": "8", "got": "8 because", "correct": False},
        {"id": "v2", "prompt": "9+9=", "expected": "18", "got": "", "correct": False},
        {"id": "v3", "prompt": "7+1=", "expected": "8", "got": "8", "correct": True},
    ],
}
SCRIPT = "import json, os\nrows = open(os.environ['DATA_PATH'] + '/train.jsonl').read().splitlines()\nprint('rows', len(rows))\n"


def proposal(**overrides: Any) -> dict[str, Any]:
    data = {
        "hypothesis": "answers carry extra text: SFT on bare answers fixes the format",
        "rationale": "validation_results of t01: most wrong answers are right answers with extra text",
        "recipe": "sft",
        "hyperparameters": {"learning_rate": 3e-4},
        "init_from": "t01",
    }
    return data | overrides


@pytest.fixture
def run_dir(tmp_path: Path) -> RunPaths:
    paths = RunPaths(tmp_path / "home", "run-tools")
    data = paths.data_dir
    data.mkdir(parents=True)
    rows = [{"id": f"r{i}", "prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(12)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:10]))
    (data / "valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[10:]))
    t01 = paths.trial_dir("t01")
    (t01 / "output").mkdir(parents=True)
    (t01 / "log.txt").write_text("".join(f"step {i} loss {1 / (i + 1):.3f}\n" for i in range(100)))
    (t01 / "metrics.json").write_text(
        json.dumps({"train_loss": 0.31})
    )  # the host's copy (agent.loop.trials.outcome)
    (t01 / "validation.json").write_text(json.dumps(VALIDATION))  # the layout agent.loop.validation writes
    return paths


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=[MODEL]) as srv:
        yield srv


def trials() -> list[TrialRecord]:
    first = Proposal(hypothesis="plain sft", recipe="sft", hyperparameters={"learning_rate": 1e-3})
    return [
        TrialRecord(
            trial_id="t01",
            index=1,
            proposal=first,
            status="succeeded",
            score=0.5,
            checkpoint="trials/t01/output",
        )
    ]


def context(paths: RunPaths) -> ProposalContext:
    return ProposalContext(
        run_id=paths.run_id,
        benchmark="arith",
        benchmark_description="add two numbers",
        base_model="tiny-arith",
        baseline_score=0.1,
        best_score=0.5,
        best_trial_id="t01",
        trials=trials(),
        trials_left=3,
        seconds_left=600.0,
        recipes=["sft"],
    )


def make_proposer(
    server: ScriptedOpenAIServer, paths: RunPaths, *, max_tool_calls: int = 8, budget: Budget | None = None
) -> LLMProposer:
    client = LLMClient(
        LLMSettings(model=MODEL, base_url=server.base_url, timeout_s=10.0, retry=FAST),
        prices=PriceTable(),
        budget=budget,
    )
    env = ToolEnv(
        workspace=paths.workspace,
        paths=paths,
        scripts=SandboxScripts(paths, LocalSandbox(), paths.workspace),
        budget=client.budget,
        trial_id="t02",
        script_timeout_s=30.0,
    )
    return LLMProposer(
        client,
        max_repair_attempts=1,
        catalog=RecipeCatalog({"sft": TrainerConfig}),
        max_tool_calls=max_tool_calls,
        tool_env=env,
    )


def test_the_llm_calls_each_tool_and_its_proposal_is_built_on_them(
    server: ScriptedOpenAIServer, run_dir: RunPaths, tmp_path: Path
) -> None:
    server.enqueue(
        tool_calls(call("data_rows", {"split": "train", "offset": 2, "limit": 3}), call("split_stats", {})),
        tool_calls(
            call("validation_results", {"trial_id": "t01"}),
            call("trial_log", {"trial_id": "t01", "lines": 5}),
        ),
        tool_calls(call("recipe_source", {"recipe": "sft"})),
        tool_calls(call("run_script", {"code": SCRIPT, "timeout_s": 20})),
        reply(proposal()),
    )
    budget = Budget(BudgetLimits(max_compute_s=1000))
    proposer = make_proposer(server, run_dir, budget=budget)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "mlartifacts")

    with tracker.node_trace(
        "propose", run_id=run_dir.run_id, benchmark="arith", trial_id="t02", inputs={}
    ) as span:
        result = proposer.propose(context(run_dir))

    assert result == Proposal(**proposal())
    requests = server.chat_requests()
    assert len(requests) == 5
    assert (
        sorted(requests[0].tool_names)
        == sorted(TOOLS.names())
        == sorted(
            ["data_rows", "split_stats", "validation_results", "trial_log", "recipe_source", "run_script"]
        )
    )
    assert "you may call tools (at most 8 calls" in requests[0].messages[0]["content"]
    # every result went back to the model as a `role: tool` message answering its call id
    results = {m["tool_call_id"]: m["content"] for m in requests[-1].messages if m["role"] == "tool"}
    assert len(results) == 6
    text = "\n".join(results.values())
    assert 'train.jsonl rows 2..4 of 10:\n{"id": "r2", "prompt": "2+2=", "answer": "4"}' in text
    assert "train: 10 rows; fields answer, id, prompt" in text and "valid: 2 rows" in text
    assert "score 0.5000 (n=4, 95% CI 0.150-0.850); 2 wrong of 4" in text
    assert (
        "- right answer with extra text: 1, e.g. '8' -> '8 because'" in text and "- empty answer: 1" in text
    )
    assert "step 99 loss 0.010" in text and "step 94" not in text and '"train_loss": 0.31' in text
    assert "recipe sft:" in text and "learning_rate" in text and "def " in text  # schema and source
    assert "exit 0 after" in text and "rows 10" in text  # the script ran in the sandbox and read the data

    # recorded: on the proposer, in trials/t02/proposal_tools.jsonl, and as spans of the node's trace
    names = [r.name for r in proposer.tool_calls]
    assert names == [
        "data_rows",
        "split_stats",
        "validation_results",
        "trial_log",
        "recipe_source",
        "run_script",
    ]
    assert all(r.ok for r in proposer.tool_calls)
    lines = (run_dir.trial_dir("t02") / "proposal_tools.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    assert [r["name"] for r in logged] == names
    assert logged[0]["arguments"] == {"split": "train", "offset": 2, "limit": 3}
    assert logged[2]["summary"] == "t01: 2/4 wrong, mostly right answer with extra text"
    assert all(r["seconds"] >= 0 for r in logged) and logged[5]["seconds"] > 0
    assert budget.spent().compute_s > 0  # the script's seconds count against the compute budget
    assert (run_dir.trial_dir("t02-script1") / "log.txt").read_text().strip() == "rows 10"

    assert span is not None
    trace = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_trace(span.trace_id)
    assert trace.info.tags[TRIAL_TAG] == "t02"
    spans = [s.name for s in trace.data.spans]
    assert spans[0] == "node:propose"
    assert spans.count("llm:propose") == 5
    assert [s for s in spans if s.startswith("tool:")] == [f"tool:{n}" for n in names]
    tool_span = next(s for s in trace.data.spans if s.name == "tool:validation_results")
    assert tool_span.outputs["summary"] == "t01: 2/4 wrong, mostly right answer with extra text"


def test_a_tool_error_goes_back_to_the_model_and_the_proposal_still_comes(
    server: ScriptedOpenAIServer, run_dir: RunPaths
) -> None:
    server.enqueue(
        tool_calls(
            call("validation_results", {"trial_id": "t09"}),
            call("data_rows", '{"split": "test"'),  # broken JSON
            call("data_rows", {"split": "test"}),  # the hidden split is not a choice
            call("read_hidden_test_set", {}),
            call("trial_log", {"trial_id": "../../grader"}),
        ),
        reply(proposal()),
    )
    proposer = make_proposer(server, run_dir)

    assert proposer.propose(context(run_dir)).recipe == "sft"

    answers = [m["content"] for m in server.chat_requests()[-1].messages if m["role"] == "tool"]
    assert answers[0].startswith("error: trial t09 has no validation results") and "trials: t01" in answers[0]
    assert answers[1].startswith("error: arguments are not valid JSON")
    assert "error: invalid arguments for data_rows: split: Input should be 'train' or 'valid'" in answers[2]
    assert answers[3].startswith("error: unknown tool 'read_hidden_test_set'; the tools are: ")
    assert answers[4].startswith("error: '../../grader' is not a trial id")
    assert [r.ok for r in proposer.tool_calls] == [False] * 5
    logged = (run_dir.trial_dir("t02") / "proposal_tools.jsonl").read_text()
    assert logged.count('"ok":false') == 5


def test_a_runaway_tool_loop_ends_with_a_message(server: ScriptedOpenAIServer, run_dir: RunPaths) -> None:
    # the model never stops calling tools: 3 calls allowed, then it must answer; it calls tools twice more
    runaway = [tool_calls(call("split_stats", {}, call_id=f"c{i}")) for i in range(6)]
    server.enqueue(*runaway)
    proposer = make_proposer(server, run_dir, max_tool_calls=3)

    with pytest.raises(ProposalError) as caught:
        proposer.propose(context(run_dir))

    message = str(caught.value)
    assert "no valid proposal in 2 attempts" in message
    assert "kept calling tools (split_stats) after its budget of 3 tool calls was spent" in message
    requests = server.chat_requests()
    assert len(requests) == 5 and server.pending == 1  # 3 tool rounds, then 2 answers that were tool calls
    assert len(proposer.tool_calls) == 3
    assert "You have used all 3 tool calls" in requests[3].messages[-1]["content"]
    assert [r.body.get("tool_choice") for r in requests] == [None, None, None, "none", "none"]


def test_tools_are_not_offered_without_a_run_and_a_budget_caps_them(
    server: ScriptedOpenAIServer, run_dir: RunPaths
) -> None:
    server.enqueue(reply(proposal()))
    proposer = make_proposer(server, run_dir, max_tool_calls=0)
    proposer.propose(context(run_dir))
    assert "tools" not in server.chat_requests()[0].body
    assert not (run_dir.trial_dir("t02") / "proposal_tools.jsonl").exists()

    spent = Budget(BudgetLimits(max_compute_s=1))
    spent.record_compute(5)
    env = ToolEnv(
        workspace=run_dir.workspace,
        paths=run_dir,
        scripts=SandboxScripts(run_dir, LocalSandbox(), run_dir.workspace),
        budget=spent,
    )
    record = call_tool(env, "c1", "run_script", json.dumps({"code": "print(1)"}))
    assert (
        not record.ok
        and record.result == "error: no compute left for scripts: compute 5s reached the budget of 1s"
    )
    gated = ToolEnv(
        workspace=run_dir.workspace,
        paths=run_dir,
        scripts=SandboxScripts(run_dir, LocalSandbox(), run_dir.workspace),
        scripts_off=_scripts_off("code"),
    )
    assert "run_script" not in gated.tool_names() and "data_rows" in gated.tool_names()
    refused = call_tool(gated, "c2", "run_script", json.dumps({"code": "print(1)"}))
    assert refused.result == "error: run_script is off under --approval code (no one reviews its code)"
    assert _scripts_off("never") is None and _scripts_off("budget,always") is not None
    assert [spec["function"]["name"] for spec in tool_specs(["data_rows"])] == ["data_rows"]
    assert tool_specs(["data_rows"])[0]["function"]["parameters"]["properties"]["limit"]["maximum"] == 50


def test_a_script_is_time_limited_and_has_no_network(run_dir: RunPaths) -> None:
    env = ToolEnv(
        workspace=run_dir.workspace,
        paths=run_dir,
        scripts=SandboxScripts(run_dir, LocalSandbox(), run_dir.workspace),
        script_timeout_s=2.0,
    )
    slow = call_tool(
        env, "c1", "run_script", json.dumps({"code": "import time\ntime.sleep(30)", "timeout_s": 60})
    )
    assert slow.ok and "limit 2s" in slow.result and "exit 0" not in slow.result and slow.seconds < 20
    net = "import socket\ntry:\n    socket.create_connection(('10.255.255.1', 80), timeout=2)\n    print('online')\nexcept OSError as e:\n    print('offline', e)\n"
    offline = call_tool(env, "c2", "run_script", json.dumps({"code": net}))
    assert "offline" in offline.result or "online" not in offline.result


def test_failure_clusters_group_wrong_answers_by_kind() -> None:
    samples = [
        {"expected": "12", "got": "13", "correct": False},
        {"expected": "12", "got": "120", "correct": False},
        {"expected": "12", "got": "x", "correct": False},
        {"expected": "12", "got": "12", "correct": True},
        {"expected": "12", "got": "13", "correct": False},
    ]
    clusters = {kind: count for kind, count, _ in failure_clusters(samples)}
    assert clusters == {"wrong number (off by <=10%)": 2, "wrong number": 1, "wrong format": 1}
