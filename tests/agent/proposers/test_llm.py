"""LLMProposer and LLMClient against a real OpenAI-compatible HTTP server, through the real `openai` SDK."""

from __future__ import annotations

import json
import logging
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.llm import (
    Budget,
    BudgetLimits,
    LLMBudgetExhaustedError,
    LLMClient,
    LLMSettings,
    LLMUnavailableError,
    PriceTable,
    PriceTableError,
    RetryPolicy,
)
from agent.proposers.base import Proposer
from agent.proposers.llm import LLMProposer, ProposalError, check_code
from agent.proposers.recipes import RecipeCatalog
from agent.proposers.trial_tree import render_trial_tree
from grader.benchmarks.arith import ArithBenchmark
from tests.support.openai_server import ScriptedOpenAIServer, error, reply
from trainers.config import TrainerConfig

MODEL = "test-model"
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05, max_total_s=20)


class GRPOTestConfig(TrainerConfig):
    """GRPO with a group size, to test recipe-specific fields."""

    num_generations: int = 4


CATALOG = RecipeCatalog({"sft": TrainerConfig, "grpo": GRPOTestConfig})


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=[MODEL, "unpriced-model"]) as srv:
        yield srv


def make_client(server: ScriptedOpenAIServer, **kwargs: Any) -> LLMClient:
    settings = LLMSettings(
        model=kwargs.pop("model", MODEL),
        base_url=server.base_url,
        timeout_s=kwargs.pop("timeout_s", 10.0),
        retry=kwargs.pop("retry", FAST_RETRY),
    )
    kwargs.setdefault("prices", PriceTable())
    return LLMClient(settings, seed=0, **kwargs)


def make_proposer(server: ScriptedOpenAIServer, **kwargs: Any) -> LLMProposer:
    return LLMProposer(make_client(server, **kwargs), MODEL, max_repair_attempts=2, catalog=CATALOG)


def good(**overrides: Any) -> dict[str, Any]:
    proposal = {
        "hypothesis": "A lower learning rate stabilises SFT.",
        "rationale": "t1 diverged.",
        "recipe": "sft",
        "hyperparameters": {"learning_rate": 3e-4, "max_steps": 300},
        "init_from": None,
        "train_py": None,
        "estimated_cost_s": 60.0,
    }
    proposal.update(overrides)
    return proposal


def trial(
    trial_id: str, index: int, status: str = "succeeded", score: float | None = None, **kw: Any
) -> TrialRecord:
    proposal = Proposal(
        hypothesis=kw.pop("hypothesis", f"hypothesis of {trial_id}"),
        recipe=kw.pop("recipe", "sft"),
        hyperparameters=kw.pop("hyperparameters", {}),
        init_from=kw.pop("init_from", None),
    )
    return TrialRecord(trial_id=trial_id, index=index, proposal=proposal, status=status, score=score, **kw)  # type: ignore[arg-type]


def context(trials: list[TrialRecord] | None = None, **overrides: Any) -> ProposalContext:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "benchmark": "arith",
        "benchmark_description": ArithBenchmark.description,
        "base_model": "tiny-arith",
        "baseline_score": 0.1,
        "best_score": None,
        "best_trial_id": None,
        "trials": trials or [],
        "trials_left": 5,
        "seconds_left": 1800.0,
        "submissions_left": 7,
        "recipes": ["sft", "grpo"],
    }
    values.update(overrides)
    return ProposalContext(**values)


def tree_trials() -> list[TrialRecord]:
    return [
        trial("t0", 0, score=0.30, hyperparameters={"learning_rate": 1e-3, "max_steps": 200}),
        trial(
            "t1",
            1,
            score=0.45,
            init_from="t0",
            hyperparameters={"learning_rate": 3e-4, "max_steps": 200},
            train_metrics={"train_loss": 0.71},
        ),
        trial(
            "t2",
            2,
            status="failed",
            init_from="t0",
            recipe="grpo",
            hyperparameters={"learning_rate": 1e-3, "max_steps": 200, "num_generations": 64},
            error="RuntimeError: out of memory while allocating 64 generations",
        ),
    ]


# -- structured output and validation ---------------------------------------------------------------------


def test_structured_output_is_parsed_into_a_proposal(server: ScriptedOpenAIServer) -> None:
    server.enqueue(reply(good()))
    proposer = make_proposer(server)
    assert isinstance(proposer, Proposer)

    proposal = proposer.propose(context())

    assert proposal == Proposal(**good())
    [request] = server.chat_requests()
    fmt = request.body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Proposal"
    assert fmt["json_schema"]["schema"]["properties"]["recipe"]["enum"] == ["grpo", "sft"]
    assert request.body["model"] == MODEL
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert len(proposer.calls) == 1 and proposer.calls[0].purpose == "propose"


def test_malformed_json_is_fed_back_and_the_repaired_answer_accepted(server: ScriptedOpenAIServer) -> None:
    broken = '{"hypothesis": "x", "recipe": "sft", "hyperparameters": {"max_steps": 10'
    server.enqueue(reply(broken), reply(f"```json\n{json.dumps(good())}\n```"))
    proposer = make_proposer(server)

    proposal = proposer.propose(context())

    assert proposal.recipe == "sft" and proposal.hyperparameters["max_steps"] == 300
    first, second = server.chat_requests()
    assert len(second.messages) == len(first.messages) + 2
    assert second.messages[-2] == {"role": "assistant", "content": broken}
    assert "invalid JSON" in second.messages[-1]["content"]
    assert len(proposer.calls) == 2


def test_schema_violation_is_named_in_the_feedback(server: ScriptedOpenAIServer) -> None:
    server.enqueue(reply({"recipe": "sft", "hyperparameters": []}), reply(good()))
    make_proposer(server).propose(context())
    feedback = server.chat_requests()[1].messages[-1]["content"]
    assert "hypothesis: Field required" in feedback
    assert "hyperparameters: Input should be a valid dictionary" in feedback


def test_unknown_recipe_is_rejected_then_fixed(server: ScriptedOpenAIServer) -> None:
    server.enqueue(
        reply(good(recipe="spf")), reply(good(recipe="grpo", hyperparameters={"num_generations": 8}))
    )

    proposal = make_proposer(server).propose(context())

    assert proposal.recipe == "grpo" and proposal.hyperparameters == {"num_generations": 8}
    feedback = server.chat_requests()[1].messages[-1]["content"]
    assert "unknown recipe 'spf' (did you mean 'sft'?); choose one of: grpo, sft" in feedback


def test_hyperparameters_outside_the_recipe_config_are_rejected(server: ScriptedOpenAIServer) -> None:
    bad_name = good(hyperparameters={"learning_rte": 1e-4})
    bad_value = good(hyperparameters={"max_steps": "many"})
    loop_owned = good(hyperparameters={"output_dir": "/tmp/x"})
    server.enqueue(reply(bad_name), reply(bad_value), reply(loop_owned))

    with pytest.raises(ProposalError) as caught:
        make_proposer(server).propose(context())

    assert caught.value.attempts == 3
    assert "'output_dir' is set by the loop" in str(caught.value)
    requests = server.chat_requests()
    assert len(requests) == 3
    assert (
        "'learning_rte' is not a field of recipe 'sft' (did you mean 'learning_rate'?)" in requests[1].text()
    )
    assert "hyperparameter 'max_steps'='many'" in requests[2].text()
    assert server.pending == 0


def test_init_from_must_name_a_trial_with_a_checkpoint(server: ScriptedOpenAIServer) -> None:
    server.enqueue(reply(good(init_from="t2")), reply(good(init_from="t1")))
    proposal = make_proposer(server).propose(context(tree_trials()))
    assert proposal.init_from == "t1"
    assert (
        "init_from 't2' is not a trial with a checkpoint; use null or one of: t0, t1"
        in (server.chat_requests()[1].messages[-1]["content"])
    )


def test_proposal_with_broken_train_py_is_repaired(server: ScriptedOpenAIServer) -> None:
    buggy = "import torch\n\ndef main(:\n    pass\n"
    fixed = "import torch\n\ndef main():\n    pass\n\nmain()\n"
    problem = check_code(buggy)
    assert problem is not None
    assert problem.startswith("SyntaxError in train.py at line 3") and "def main(:" in problem
    assert check_code(fixed) is None
    assert check_code("return 1\n") is not None  # found by compile, not by ast.parse
    assert check_code("  \n") is not None

    still_buggy = "def main():\n  pass\n   oops\n"
    server.enqueue(reply(good(train_py=still_buggy)), reply(good(train_py=fixed)))
    proposer = make_proposer(server)
    failing = Proposal(**good(train_py=buggy))
    traceback_text = f"{problem}\nTraceback (most recent call last):\n  File train.py, line 3"

    repaired = proposer.repair(failing, traceback_text, context())

    assert repaired.train_py == fixed
    first, second = server.chat_requests()
    assert problem in first.text() and "def main(:" in first.text()  # the failure and the failing script
    assert "IndentationError in train.py at line 3" in second.messages[-1]["content"]
    assert [c.purpose for c in proposer.calls] == ["repair", "repair"]


def test_refusal_and_cut_off_answers_are_retried(server: ScriptedOpenAIServer) -> None:
    server.enqueue(
        reply(None, refusal="I cannot help with that."),
        reply('{"hypothesis": "cut', finish_reason="length"),
        reply(good()),
    )
    make_proposer(server).propose(context())
    requests = server.chat_requests()
    assert "refused: I cannot help with that." in requests[1].messages[-1]["content"]
    assert "cut off (finish_reason=length)" in requests[2].messages[-1]["content"]


def test_server_without_json_schema_falls_back_to_json_mode() -> None:
    with ScriptedOpenAIServer(models=[MODEL], response_formats={"text", "json_object"}) as srv:
        srv.enqueue(reply(good()), reply(good(recipe="grpo")))
        proposer = make_proposer(srv)

        assert proposer.propose(context()).recipe == "sft"
        assert proposer.propose(context()).recipe == "grpo"

        kinds = [r.body["response_format"]["type"] for r in srv.chat_requests()]
        assert kinds == ["json_schema", "json_object", "json_object"]  # degraded once, then remembered
        assert proposer.client.structured_mode == "json_object"
        assert (
            "one JSON object" in srv.chat_requests()[1].messages[0]["content"]
        )  # the schema is in the prompt


# -- transport: retries and a dead endpoint ---------------------------------------------------------------


def test_rate_limit_is_retried_after_the_servers_delay(server: ScriptedOpenAIServer) -> None:
    server.enqueue(error(429, "Rate limit reached", retry_after=0.3), reply(good()))
    proposer = make_proposer(server)

    started = time.monotonic()
    proposer.propose(context())

    assert time.monotonic() - started >= 0.3  # Retry-After honoured
    assert proposer.client.retries == 1
    assert proposer.calls[0].attempts == 2
    assert len(server.chat_requests()) == 2


def test_backoff_is_exponential_jittered_and_bounded(server: ScriptedOpenAIServer) -> None:
    policy = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=8.0, max_retry_after_s=5.0)
    rng = random.Random(0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = {policy.backoff(attempt, rng) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(delays) > 1  # jittered
    assert policy.backoff(1, rng, retry_after=2.5) == 2.5
    assert policy.backoff(1, rng, retry_after=100) == 5.0

    # a Retry-After beyond the call's total time budget: give up at once instead of sleeping past it
    server.enqueue(error(429, "slow down", retry_after=30), reply(good()))
    patient = RetryPolicy(max_attempts=5, max_total_s=5, max_retry_after_s=60)
    client = make_client(server, retry=patient)
    started = time.monotonic()
    with pytest.raises(
        LLMUnavailableError,
        match=r"kept failing \(1 attempt over .*HTTP 429: slow down; the server asks to wait 30s",
    ):
        client.chat([{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 5 and len(server.chat_requests()) == 1


def test_request_timeout_is_retried(server: ScriptedOpenAIServer) -> None:
    server.enqueue(reply(good(), delay_s=2.0), reply(good()))
    proposer = make_proposer(server, timeout_s=0.5)
    proposer.propose(context())
    assert proposer.calls[0].attempts == 2 and proposer.client.retries == 1


def test_server_errors_until_attempts_run_out_give_a_clear_error(
    server: ScriptedOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue(*[error(500, "upstream exploded") for _ in range(3)], reply(good()))
    proposer = make_proposer(server)

    with caplog.at_level(logging.WARNING), pytest.raises(LLMUnavailableError) as caught:
        proposer.propose(context())

    message = str(caught.value)
    assert "kept failing (3 attempts" in message and "HTTP 500: upstream exploded" in message
    assert "\n" not in message
    assert len(server.chat_requests()) == 3 and server.pending == 1
    assert proposer.client.retries == 2 and proposer.calls == []


def test_dead_endpoint_raises_one_actionable_line(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nobody listens on once this block ends
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = LLMSettings(model=MODEL, base_url=f"http://127.0.0.1:{port}/v1", retry=FAST_RETRY)
    proposer = LLMProposer(LLMClient(settings, prices=PriceTable()), catalog=CATALOG)

    with caplog.at_level(logging.DEBUG), pytest.raises(LLMUnavailableError) as caught:
        proposer.propose(context())

    err = caught.value
    message = str(err)
    assert message.startswith(f"cannot reach the LLM endpoint http://127.0.0.1:{port}/v1")
    assert "OPENAI_BASE_URL" in message and "3 attempts" in message and "\n" not in message
    assert err.__cause__ is None and err.__suppress_context__  # no chained SDK traceback
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err + caplog.text
    assert all(record.exc_info is None for record in caplog.records)


def test_unknown_model_and_bad_key_fail_at_once(server: ScriptedOpenAIServer) -> None:
    proposer = make_proposer(server, model="gpt-nonexistent")
    with pytest.raises(LLMUnavailableError, match="model 'gpt-nonexistent' not found at .*--driver-model"):
        proposer.client.chat([{"role": "user", "content": "hi"}])
    assert len(server.chat_requests()) == 1  # not retried

    server.enqueue(error(429, "You exceeded your current quota", error_code="insufficient_quota"))
    with pytest.raises(LLMUnavailableError, match="out of quota .*add credit"):
        make_client(server).chat([{"role": "user", "content": "hi"}])
    assert len(server.chat_requests()) == 2  # a quota error is not a rate limit: not retried

    with ScriptedOpenAIServer(models=[MODEL], api_key="right") as locked:
        settings = LLMSettings(
            model=MODEL, base_url=locked.base_url, api_key=SecretStr("wrong"), retry=FAST_RETRY
        )
        client = LLMClient(settings, prices=PriceTable())
        with pytest.raises(LLMUnavailableError, match="rejected the API key .*set OPENAI_API_KEY"):
            client.list_models()
        ok = LLMClient(settings.model_copy(update={"api_key": SecretStr("right")}), prices=PriceTable())
        assert ok.list_models() == [MODEL]


def test_proposer_from_env_reaches_the_server(
    server: ScriptedOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("RLLOOP_LLM_PRICES", raising=False)
    price_file = tmp_path / "prices.json"
    price_file.write_text(json.dumps({MODEL: {"input_per_1m": 1.0, "output_per_1m": 1.0}}))
    budget = Budget(BudgetLimits(max_tokens=100_000))
    proposer = LLMProposer.from_env(MODEL, budget=budget, price_file=price_file, retry=FAST_RETRY)
    server.enqueue(reply(good(), prompt_tokens=500_000, completion_tokens=500_000))

    proposal = proposer.propose(context(recipes=[]))  # recipes from trainers.registry when present

    assert proposal.recipe == "sft" and proposer.model == MODEL
    assert budget.spent().usd == pytest.approx(1.0)
    assert budget.exhausted() == "LLM tokens 1000000 reached the budget of 100000"
    assert server.chat_requests()[0].headers["authorization"] == "Bearer sk-no-key-required"


def test_settings_from_env_and_missing_key() -> None:
    settings = LLMSettings.from_env(
        "m", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-1"}
    )
    assert settings.base_url == "http://127.0.0.1:9/v1" and settings.api_key is not None
    assert "sk-1" not in repr(settings)
    with pytest.raises(LLMUnavailableError, match="OPENAI_API_KEY is not set"):
        LLMClient(LLMSettings.from_env("gpt-4o", {}))


# -- accounting and budget --------------------------------------------------------------------------------


def test_tokens_and_cost_follow_the_price_table(
    server: ScriptedOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    price_file = tmp_path / "prices.yaml"
    price_file.write_text(f"prices:\n  {MODEL}:\n    input_per_1m: 2.0\n    output_per_1m: 8.0\n")
    budget = Budget()
    client = make_client(server, prices=PriceTable.from_file(price_file), budget=budget)
    proposer = LLMProposer(client, catalog=CATALOG)
    server.enqueue(
        reply("not json", prompt_tokens=1000, completion_tokens=10),
        reply(good(), prompt_tokens=1200, completion_tokens=300),
    )

    proposer.propose(context())

    first, second = proposer.calls
    assert (first.prompt_tokens, first.completion_tokens, first.total_tokens) == (1000, 10, 1010)
    assert first.cost_usd == pytest.approx((1000 * 2.0 + 10 * 8.0) / 1e6)
    assert second.cost_usd == pytest.approx((1200 * 2.0 + 300 * 8.0) / 1e6)
    spent = budget.spent()
    assert spent.tokens == 2510 and spent.llm_calls == 2
    assert spent.usd == pytest.approx(client.total_cost_usd) and client.total_tokens == 2510

    with caplog.at_level(logging.WARNING):
        server.enqueue(reply("hi"), reply("hi again", omit_usage=True))
        client.chat([{"role": "user", "content": "hello"}], model="unpriced-model")
        last = client.chat([{"role": "user", "content": "hello"}], model="unpriced-model")
    warnings = [r for r in caplog.records if "no price for LLM model 'unpriced-model'" in r.getMessage()]
    assert len(warnings) == 1  # once per model
    assert last.record.cost_usd == 0.0 and last.record.usage_estimated and last.record.completion_tokens == 2


def test_price_table_lookup_env_and_bad_files(tmp_path: Path) -> None:
    table = PriceTable.default()
    assert table.price_for("gpt-4o-2024-08-06") == table.prices["gpt-4o"]
    assert table.price_for("gpt-4o-mini-2024-07-18") == table.prices["gpt-4o-mini"]
    assert table.price_for("openai/gpt-4.1") == table.prices["gpt-4.1"]

    env_table = PriceTable.from_env(
        {"RLLOOP_LLM_PRICES": '{"my-model": {"input_per_1m": 1, "output_per_1m": 3}}'}
    )
    assert env_table.cost("my-model", 1_000_000, 1_000_000) == pytest.approx(4.0)
    assert "gpt-4o" in env_table.prices  # merged over the defaults

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"m": {"input_per_1m": -1, "output_per_1m": 1}}))
    with pytest.raises(PriceTableError, match=r"bad.json: prices.m.input_per_1m: Input should be greater"):
        PriceTable.from_file(bad)
    with pytest.raises(PriceTableError, match="cannot read price file"):
        PriceTable.from_file(tmp_path / "missing.yaml")


def test_budget_exhaustion_stops_calls_before_they_are_made(server: ScriptedOpenAIServer) -> None:
    prices = PriceTable.from_mapping({MODEL: {"input_per_1m": 1000.0, "output_per_1m": 1000.0}})
    budget = Budget(BudgetLimits(max_usd=1.0, max_tokens=10_000, max_compute_s=60))
    proposer = LLMProposer(make_client(server, prices=prices, budget=budget), catalog=CATALOG)
    server.enqueue(reply(good(), prompt_tokens=900, completion_tokens=300), reply(good()))

    proposer.propose(context())  # $1.20 spent: over the $1 limit only after this call
    reason = budget.exhausted()
    assert reason == "LLM spend $1.2000 reached the budget of $1.0000"

    with pytest.raises(LLMBudgetExhaustedError, match=r"LLM budget exhausted: LLM spend \$1.2000"):
        proposer.propose(context())
    assert len(server.chat_requests()) == 1 and server.pending == 1

    compute = Budget(BudgetLimits(max_compute_s=100))
    compute.record_compute(60)
    assert compute.exhausted() is None
    compute.record_compute(45)
    assert compute.exhausted() == "compute 105s reached the budget of 100s"


def test_budget_ledger_carries_spend_to_the_next_process(tmp_path: Path) -> None:
    ledger = tmp_path / "budget.json"
    first = Budget(BudgetLimits(max_tokens=1000), ledger=ledger)
    first.record_llm(600, 100, usd=0.5)
    first.record_compute(12.5)
    again = Budget(BudgetLimits(max_tokens=1000), ledger=ledger)  # e.g. after kill -9 and resume
    assert again.spent() == first.spent() and again.spent().tokens == 700 and again.spent().compute_s == 12.5
    again.record_llm(300, 50, usd=0.1)
    assert again.exhausted() == "LLM tokens 1050 reached the budget of 1000"
    assert not list(tmp_path.glob("*.tmp"))  # written through a temp file, none left behind
    ledger.write_text("{half a snapshot")
    with pytest.raises(ValueError, match="budget ledger .*budget.json is unreadable"):
        Budget(ledger=ledger)


# -- the prompt -------------------------------------------------------------------------------------------


def test_prompt_shows_the_trial_tree_budget_and_api_but_no_test_data(server: ScriptedOpenAIServer) -> None:
    server.enqueue(reply(good()))
    budget = Budget(BudgetLimits(max_usd=5.0))
    proposer = LLMProposer(make_client(server, budget=budget), catalog=CATALOG)
    ctx = context(
        tree_trials(),
        best_score=0.45,
        best_trial_id="t1",
        trials_left=3,
        seconds_left=1234.0,
        submissions_left=4,
        feedback="Try GRPO with fewer generations.",
    )

    proposer.propose(ctx)

    user = server.chat_requests()[0].messages[1]["content"]
    assert (
        "Trials left: 3" in user and "Time left: 1234s (20.6 min)" in user and "Submissions left: 4" in user
    )
    assert "LLM spend $0.0000 of $5.0000" in user
    assert "best so far: 0.4500 (trial t1)" in user
    assert "recipe `grpo` (GRPOTestConfig)" in user and "num_generations: int (default 4)" in user
    assert "learning_rate: float (default 0.001)" in user
    assert "Try GRPO with fewer generations." in user
    tree = render_trial_tree(ctx.trials, "tiny-arith", 0.1, "t1")
    assert tree in user
    lines = tree.splitlines()
    assert lines[0] == "base model tiny-arith (baseline score 0.1000)"
    assert lines[1] == "└── t0 [succeeded] score=0.3000 (+0.2000 vs parent)"
    assert "    ├── t1 [succeeded] score=0.4500 (+0.1500 vs parent) BEST" in lines
    assert "    └── t2 [failed] not scored" in lines
    assert "changed: learning_rate 0.001 -> 0.0003" in tree
    assert "changed: recipe sft -> grpo; num_generations (default) -> 64" in tree
    assert "error: RuntimeError: out of memory while allocating 64 generations" in tree
    assert "train metrics: train_loss=0.71" in tree
    assert "Checkpoints you may continue from (init_from): t0, t1" in user

    body = json.dumps(server.chat_requests()[0].body)
    leaked = [s for s in ArithBenchmark().load("test") if f"{s.prompt}{s.answer}" in body]
    assert leaked == []


def test_trial_tree_handles_orphans_and_cycles() -> None:
    trials = [
        trial("a", 0, init_from="b"),  # points at a later trial: cannot be its parent
        trial("b", 1, init_from="a"),
        trial("c", 2, init_from="ghost"),
    ]
    tree = render_trial_tree(trials, "base", None, None)
    assert tree.count("a [succeeded]") == 1 and tree.count("b [succeeded]") == 1
    assert "(init_from ghost is not a known trial)" in tree
    assert "(init_from b is not a known trial)" in tree
    assert "├── a" in tree and "│   └── b" in tree and "└── c" in tree
    assert render_trial_tree([], "base", None, None).endswith("(no trials yet)")


def test_catalog_with_names_only_checks_recipe_names_only() -> None:
    catalog = RecipeCatalog({"sft": None})
    assert catalog.validate("nope", {}) == ["unknown recipe 'nope'; choose one of: sft"]
    assert catalog.validate("sft", {"anything": 1}) == []
    assert "recipe `sft` (config fields not available)" in catalog.render()
    assert RecipeCatalog.from_registry(["sft"]).names() == [
        "sft"
    ]  # registry or not, limited to the names given


def test_catalog_reads_the_installed_trainer_registry() -> None:
    registry = pytest.importorskip("trainers.registry")
    names = [r if isinstance(r, str) else r.name for r in registry.list_recipes()]
    catalog = RecipeCatalog.from_registry()
    assert catalog.names() == sorted(names)
    for name in names:
        fields = catalog.settable_fields(name)
        assert fields is not None and "learning_rate" in fields and "output_dir" not in fields
