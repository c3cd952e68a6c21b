"""`python -m grader serve --config FILE`: run the grading server described by a GraderConfig JSON file."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from grader.config import GraderConfig


def _configure_logging(private_dir: Path) -> None:
    private_dir.mkdir(parents=True, exist_ok=True)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    file_handler = logging.FileHandler(private_dir / "grader.log", encoding="utf-8")
    file_handler.setFormatter(formatter)
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(formatter)
    stream.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.handlers[:] = [file_handler, stream]


def _check(config: GraderConfig) -> str | None:
    """One line saying what is wrong with a config before the server starts, or None."""
    from grader.benchmarks import get_benchmark
    from tasks.plugins import UnknownPluginError

    if not (config.base_model / "config.json").is_file():
        return f"base_model {config.base_model} has no config.json; build or download the base model first"
    try:
        get_benchmark(config.benchmark)
    except UnknownPluginError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the grading server")
    serve.add_argument("--config", type=Path, required=True, help="GraderConfig JSON file")
    args = parser.parse_args(argv)

    try:
        config = GraderConfig.from_file(args.config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problem = _check(config)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    _configure_logging(config.private_dir)

    import uvicorn

    from grader.server import create_app

    uvicorn.run(create_app(config), host=config.host, port=config.port, log_config=None, access_log=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
