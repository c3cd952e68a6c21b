"""The run page's API over real HTTP, without a model: who may read it, ETags, the approval card's context, edits
checked against the recipe's schema, a trial folder that lies (links to files it must not show), and pages drawn
without importing a trainer.

Proposals are published with agent.loop.approvals.publish_pending, as a waiting run does; the real run is in
test_run_page.py (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.core.records import Proposal, TrialRecord
from agent.loop.approvals import publish_pending, read_decision
from tests.agent.service.support import add_users, running_service
from trainers.catalog import CATALOG_NAME, describe_recipes

HEAVY = ("torch", "transformers", "trl", "datasets")


@pytest.fixture(scope="module")
def catalog_json() -> str:
    """The recipes as a run describes them when it starts (its run_dir/recipes.json)."""
    return describe_recipes().model_dump_json()


@pytest.fixture
def home(tmp_path: Path, catalog_json: str) -> Path:
    home = tmp_path / "home"
    run_dir = home / "runs" / "web-run"
    proposal = Proposal(
        hypothesis="lower the learning rate",
        recipe="sft",
        hyperparameters={"learning_rate": 5e-4, "max_seconds": 42.0},
    )
    publish_pending(run_dir, TrialRecord(trial_id="t01", index=1, proposal=proposal))
    (run_dir / "run.json").write_text(
        json.dumps(
            {"benchmark": "arith", "base_model": "tiny-arith", "approval": "always,budget", "loop_n": 2}
        )
    )
    (run_dir / CATALOG_NAME).write_text(catalog_json)
    return home


def test_a_browser_gets_the_page_and_an_api_client_the_data(home: Path) -> None:
    tokens = add_users(home, {"val": "viewer"})
    with running_service(home, token=tokens["val"]) as client:
        html = client.get("/runs/web-run", headers={"Accept": "text/html,application/xhtml+xml"})
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert "lower the learning rate" not in html.text  # the page holds no data of its own
        assert client.get("/runs/web-run").json()["run_id"] == "web-run"  # JSON for API clients
        for path in ("/ui.js", "/ui.css"):
            assert client.get(path, headers={"Authorization": ""}).status_code == 200

        view = client.get("/runs/web-run/view")
        assert view.status_code == 200
        body = view.json()
        assert [(n["id"], n["state"]) for n in body["nodes"]] == [("base", "base"), ("t01", "pending")]
        assert body["trials_planned"] == 2
        again = client.get("/runs/web-run/view", headers={"If-None-Match": view.headers["ETag"]})
        assert again.status_code == 304 and again.content == b""  # nothing changed: nothing sent
        publish_pending(
            home / "runs" / "web-run",
            TrialRecord(trial_id="t02", index=2, proposal=Proposal(hypothesis="more", recipe="sft")),
        )
        moved = client.get("/runs/web-run/view", headers={"If-None-Match": view.headers["ETag"]})
        assert moved.status_code == 200 and moved.headers["ETag"] != view.headers["ETag"]


def test_the_approval_card_carries_its_context(home: Path) -> None:
    with running_service(home) as client:
        (item,) = client.get("/approvals").json()
        context = item["context"]
        assert context["parent"]["id"] == "base" and context["operator"] == "draft"
        assert context["estimated_compute_s"] == 42.0
        assert context["asked_because"] == ["always: every proposal waits for a person"]
        assert "+learning_rate = 0.0005" in context["config_diff"]
        changed = {c["name"]: c for c in context["changes"]}
        assert changed["learning_rate"]["replaced"] == 0.001  # sft's default
        assert changed["learning_rate"]["replaced_from"] == "recipe default"
        fields = {f["name"]: f for f in context["fields"]}
        assert fields["learning_rate"]["type"] == "number" and fields["learning_rate"]["proposed"]
        assert fields["max_steps"]["type"] == "integer" and not fields["max_steps"]["proposed"]
        assert (
            "model_path" not in fields and "output_dir" not in fields
        )  # the loop's own fields are not offered
        assert context["code"]["kind"] == "recipe" and "def " in context["code"]["code"]


def test_an_edit_is_checked_against_the_recipe_schema(home: Path) -> None:
    run_dir = home / "runs" / "web-run"
    with running_service(home) as client:
        bad = client.post("/approvals/web-run/t01", json={"action": "edit", "set": {"max_steps": "many"}})
        assert bad.status_code == 422 and "max_steps" in bad.text
        assert read_decision(run_dir, "t01") is None
        for edit, words in (
            ({"max_length": 0}, "max_length: above 0 is needed, got 0"),
            ({"lr": 1e-4}, "lr: sft has no such hyperparameter"),
            ({"output_dir": "/etc"}, "output_dir: set by the loop, not by a proposal"),
            ({"lr_scheduler_type": "sawtooth"}, "lr_scheduler_type: one of 'linear'"),
        ):
            refused = client.post("/approvals/web-run/t01", json={"action": "edit", "set": edit})
            assert refused.status_code == 422 and words in refused.text, refused.text
        assert read_decision(run_dir, "t01") is None
        good = client.post("/approvals/web-run/t01", json={"action": "edit", "set": {"max_steps": 7}})
        assert good.status_code == 200, good.text
        decision = read_decision(run_dir, "t01")
        assert decision is not None and decision.set == {"max_steps": 7}


def test_the_trial_view_never_follows_a_link_the_trial_left(home: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the grader's token: hunter2\n")
    trial_dir = home / "runs" / "web-run" / "trials" / "t01"
    (trial_dir / "output").mkdir(parents=True)
    os.symlink(secret, trial_dir / "log.txt")
    os.symlink(secret, trial_dir / "output" / "log_history.jsonl")
    os.mkfifo(trial_dir / "validation.json")  # a FIFO would block a naive read forever
    with running_service(home) as client:
        response = client.get("/runs/web-run/trials/t01", timeout=20)
        assert response.status_code == 200, response.text
        body = response.json()
        assert "hunter2" not in response.text
        assert body["log_tail"] == "" and body["metric_series"] == [] and body["failures"] == []
        assert any("log.txt" in note for note in body["notes"])
        assert any("validation.json" in note for note in body["notes"])
        assert client.get("/runs/web-run/trials/t09").status_code == 404


def test_a_run_without_its_recipe_catalog_says_so_until_the_service_has_read_the_recipes(home: Path) -> None:
    """A run from before runs wrote recipes.json: its card answers at once, saying the recipes are being read, and
    shows the recipe's defaults, code and form once a child process has described them (never this process)."""
    (home / "runs" / "web-run" / CATALOG_NAME).unlink()
    with running_service(home) as client:
        (item,) = client.get("/approvals").json()
        first = item["context"]
        if first["notes"]:  # the service's own catalog is not ready yet: the card says why it is thin
            assert "being read" in first["notes"][0] and first["code"]["code"] == ""
            assert {f["type"] for f in first["fields"]} == {"json"}  # the proposal's own values, as JSON
        deadline = time.monotonic() + 300
        context = first
        while context["notes"] and time.monotonic() < deadline:  # the page polls the same way
            time.sleep(0.5)
            context = client.get("/approvals").json()[0]["context"]
        assert not context["notes"], context["notes"]
        changed = {c["name"]: c for c in context["changes"]}
        assert changed["learning_rate"]["replaced"] == 0.001 and "def " in context["code"]["code"]


def test_drawing_every_page_imports_no_trainer_into_the_service(home: Path, tmp_path: Path) -> None:
    """The service's process after it answered every page (the run page, a trial's, the approval card with its
    recipe diff and form, the lists, the health check): none of torch, transformers, TRL or datasets in sys.modules.
    Importing them is what kept a fresh service's first pages waiting for seconds."""
    trial_dir = home / "runs" / "web-run" / "trials" / "t01"
    trial_dir.mkdir(parents=True)
    (trial_dir / "log.txt").write_text("[trainers] step 1/2 loss 1.0\n")
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from fastapi.testclient import TestClient
        from agent.service import ServiceSettings, create_app

        app = create_app(ServiceSettings(home=Path({str(home)!r})))
        html = {{"Accept": "text/html"}}
        with TestClient(app) as client:
            client.headers["Authorization"] = f"Bearer {{app.state.admin_token}}"
            answers = {{}}
            for url, headers in [
                ("/", html), ("/runs/web-run", html), ("/runs/web-run/trials/t01", html), ("/health", {{}}),
                ("/auth/me", {{}}), ("/runs", {{}}), ("/runs/web-run", {{}}), ("/runs/web-run/view", {{}}),
                ("/runs/web-run/trials/t01", {{}}), ("/approvals", {{}}),
            ]:
                answers[url + (" (page)" if headers else "")] = client.get(url, headers=headers).status_code
            context = client.get("/approvals").json()[0]["context"]
        print(json.dumps({{
            "answers": answers,
            "fields": len(context["fields"]),
            "loaded": [name for name in {HEAVY!r} if name in sys.modules],
        }}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found["answers"].values()) == {200}, found["answers"]
    assert found["fields"] > 5  # the edit form was drawn from the recipe's schema
    assert found["loaded"] == [], f"the service imported {found['loaded']} to draw its pages"
