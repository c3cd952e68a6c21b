"""How long a reviewer waits for the first page of a freshly started service: `rlloop serve` started in a new process
over a home with a finished run, then the requests the run page and a trial page make, in the browser's order.

Per fresh process (`--repeat` of them, medians printed): seconds from the process's start until /health answers, the
first run page (its HTML, ui.js, ui.css, /health, /auth/me, /runs/<id>/view, /approvals) and then the first trial
page (its HTML, assets, /health, /auth/me, /runs/<id>/trials/<t>), each summed over its requests; then the same pages
again (warm). Goal: each first page under 1 s.

    python benchmarks/first_page.py --home /path/to/home [--run-id ID] [--trial t01] [--repeat 3]
    python benchmarks/first_page.py                      # makes a finished run first (a short `rlloop run`)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ASSETS = ("/ui.js", "/ui.css", "/health", "/auth/me")
HTML = {"Accept": "text/html,application/xhtml+xml"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_run(home: Path) -> str:
    """A short finished run on embedded defaults (local sandbox, two trials of a few steps); returns its id."""
    command = [
        sys.executable,
        "-m",
        "agent.cli",
        "run",
        "--home",
        str(home),
        "--loop-n",
        "2",
        "--sandbox",
        "local",
        "--trial-steps",
        "20",
        "--quiet",
    ]
    print(f"making a finished run: {' '.join(command[2:])}", flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return latest_run(home)


def latest_run(home: Path) -> str:
    finished = sorted(d.name for d in (home / "runs").iterdir() if (d / "summary.json").is_file())
    if not finished:
        raise SystemExit(f"no finished run under {home / 'runs'}: run `rlloop run` there first")
    return finished[-1]


def first_trial(home: Path, run_id: str) -> str:
    trials = sorted(d.name for d in (home / "runs" / run_id / "trials").iterdir() if d.name != "base")
    if not trials:
        raise SystemExit(f"run {run_id} has no trials")
    return trials[-1]


def timed_page(client: httpx.Client, page: str, data: str, extra: tuple[str, ...] = ()) -> float:
    """Seconds for one page: its HTML, then what its script fetches, one after another (as the page does)."""
    started = time.perf_counter()
    response = client.get(page, headers=HTML)
    assert response.status_code == 200 and "<html" in response.text, (page, response.status_code)
    for url in (*ASSETS, data, *extra):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code, response.text[:300])
    return time.perf_counter() - started


def one_process(home: Path, run_id: str, trial: str) -> dict[str, float]:
    """Start `rlloop serve` on `home`, time its first pages and its second ones, stop it."""
    port = free_port()
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--home", str(home), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            assert server.poll() is None, "the service exited"
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        ready = time.perf_counter() - started
        token = (home / "service_admin_token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            run_page, run_data = f"/runs/{run_id}", f"/runs/{run_id}/view"
            trial_page = f"/runs/{run_id}/trials/{trial}"
            figures = {
                "ready_s": ready,
                "first_run_page_s": timed_page(client, run_page, run_data, ("/approvals",)),
                "first_trial_page_s": timed_page(client, trial_page, trial_page),
                "warm_run_page_s": timed_page(client, run_page, run_data, ("/approvals",)),
                "warm_trial_page_s": timed_page(client, trial_page, trial_page),
            }
        return figures
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="RLLOOP_HOME with a finished run (default: make one)")
    parser.add_argument("--run-id", help="the run to open (default: the newest finished one)")
    parser.add_argument("--trial", help="the trial to open (default: the run's last)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh service processes to time")
    args = parser.parse_args()
    scratch = None
    if args.home is None:
        scratch = tempfile.TemporaryDirectory(prefix="rlloop-first-page-")
        home = Path(scratch.name)
        run_id = make_run(home)
    else:
        home = args.home.resolve()
        run_id = args.run_id or latest_run(home)
    trial = args.trial or first_trial(home, run_id)
    print(f"run {run_id}, trial {trial}, home {home}: {args.repeat} fresh `rlloop serve` processes")
    rows = []
    for i in range(args.repeat):
        figures = one_process(home, run_id, trial)
        rows.append(figures)
        print(f"  #{i + 1}: " + "  ".join(f"{k} {v:.3f}" for k, v in figures.items()), flush=True)
    print(f"\n{'':22}{'median':>8}{'max':>8}")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"{key:22}{statistics.median(values):8.3f}{max(values):8.3f}")
    goal = max(statistics.median(r[k] for r in rows) for k in ("first_run_page_s", "first_trial_page_s"))
    print(f"\nfirst pages under 1 s: {'yes' if goal < 1.0 else 'NO'} (slowest median {goal:.3f} s)")
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
