"""Benchmark registry: built-ins, Python entry points (`rlloop.benchmarks`) and a folder of definitions.

A folder definition (`RLLOOP_BENCHMARKS_DIR/<name>/benchmark.yaml`) names a Python scoring module beside it:

    name: parity
    description: Is the number even or odd?
    module: scoring.py        # defines score(completion, sample) -> float; optionally load(split) -> list[Sample]
    max_new_tokens: 4
    stop: ["\\n"]

Without `load`, splits are read from `train.jsonl`, `valid.jsonl`, `test.jsonl` beside the YAML
(`{"id","prompt","answer"}` lines). A broken definition is reported with its path and skipped; it never hides the
others.

This registry is the trainers' and the trainer image's: every benchmark it returns refuses `load("test")`
(`HeldOutSplitError`). The grader's registry (grader/benchmarks/registry.py) resolves the same names to objects that
can draw test.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.arith import ArithBenchmark
from tasks.atomic import atomic_write_lines
from tasks.base import Benchmark, Sample, Split, public_split
from tasks.countdown import CountdownBenchmark
from tasks.frozenlake import FrozenLakeBenchmark
from tasks.gsm8k import GSM8KBenchmark
from tasks.humaneval import HumanEvalBenchmark
from tasks.sokoban import SokobanBenchmark

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rlloop.benchmarks"
FOLDER_ENV = "RLLOOP_BENCHMARKS_DIR"
BUILTINS: dict[str, Callable[[], Benchmark]] = {
    "arith": ArithBenchmark,
    "gsm8k": GSM8KBenchmark,
    "countdown": CountdownBenchmark,
    "frozenlake": FrozenLakeBenchmark,
    "sokoban": SokobanBenchmark,
    "humaneval": HumanEvalBenchmark,
}

Source = Literal["builtin", "entry point", "path"]


class UnknownBenchmarkError(KeyError):
    """Raised for a benchmark name no registry knows; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


class BenchmarkInfo(BaseModel):
    """One row of `rlloop benchmarks`."""

    name: str
    source: Source
    description: str
    location: str = ""  # entry point target or definition folder


class BenchmarkDefinition(BaseModel):
    """The schema of a folder definition's benchmark.yaml."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str
    module: str = "scoring.py"
    max_new_tokens: int = Field(default=32, ge=1)
    stop: list[str] = Field(default_factory=lambda: ["\n"])


class FolderBenchmark:
    """A benchmark defined by a folder: YAML metadata plus a Python scoring module."""

    def __init__(self, definition: BenchmarkDefinition, folder: Path, module: ModuleType) -> None:
        self.name = definition.name
        self.description = definition.description
        self.max_new_tokens = definition.max_new_tokens
        self.stop = list(definition.stop)
        self.folder = folder
        self._module = module

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        return self.read_split(split)

    def read_split(self, split: Split) -> list[Sample]:
        loader = getattr(self._module, "load", None)
        if callable(loader):
            return [s if isinstance(s, Sample) else Sample.model_validate(s) for s in loader(split)]
        path = self.folder / f"{split}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(
                f"benchmark {self.name!r} has no {path}; add it or define load() in the module"
            )
        with path.open(encoding="utf-8") as handle:
            return [Sample.model_validate_json(line) for line in handle if line.strip()]

    def score(self, completion: str, sample: Sample) -> float:
        return float(self._module.score(completion, sample))


@dataclass
class Discovery:
    """What the registry found: benchmark factories with their descriptions, and problems worth reporting."""

    factories: dict[str, tuple[Callable[[], Benchmark], BenchmarkInfo]]
    problems: list[str]


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"rlloop_benchmark_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PublicSplits:
    """A plugin benchmark seen through `tasks`: every attribute of the plugin's object, but no test split."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def load(self, split: Split) -> list[Sample]:
        public_split(str(self._inner.name), split)
        loaded: list[Sample] = self._inner.load(split)
        return loaded


def _load_definition(folder: Path, kind: type[FolderBenchmark] = FolderBenchmark) -> FolderBenchmark:
    yaml_path = folder / "benchmark.yaml"
    raw: Any = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    definition = BenchmarkDefinition.model_validate(raw)
    module_path = (folder / definition.module).resolve()
    if folder.resolve() not in module_path.parents or not module_path.is_file():
        raise FileNotFoundError(f"module {definition.module!r} is not a file inside the definition folder")
    module = _load_module(module_path, definition.name)
    if not callable(getattr(module, "score", None)):
        raise AttributeError(f"{definition.module} defines no score(completion, sample) function")
    return kind(definition, folder, module)


def _short_reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "benchmark.yaml"
        return f"{where}: {first['msg']}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _discover_folder(root: Path, found: Discovery, kind: type[FolderBenchmark]) -> None:
    if not root.is_dir():
        found.problems.append(
            f"{FOLDER_ENV}={root} is not a folder; point it at a folder of benchmark definitions"
        )
        return
    folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "benchmark.yaml").is_file())
    if not folders:
        found.problems.append(f"{root} holds no benchmark definitions (no */benchmark.yaml)")
        return
    for folder in folders:
        try:
            bench = _load_definition(folder, kind)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything; report and move on
            found.problems.append(f"skipped broken benchmark definition {folder}: {_short_reason(exc)}")
            continue
        if bench.name in found.factories:
            found.problems.append(f"skipped {folder}: benchmark name {bench.name!r} is already taken")
            continue
        info = BenchmarkInfo(
            name=bench.name, source="path", description=bench.description, location=str(folder)
        )
        found.factories[bench.name] = (lambda b=bench: b, info)  # type: ignore[misc]


def _discover_entry_points(found: Discovery) -> None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found.factories:
            found.problems.append(
                f"skipped entry point {ep.value}: benchmark name {ep.name!r} is already taken"
            )
            continue
        try:
            target = ep.load()
            description = str(getattr(target, "description", ""))
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the registry
            found.problems.append(f"skipped broken entry point {ep.name} = {ep.value}: {_short_reason(exc)}")
            continue
        info = BenchmarkInfo(name=ep.name, source="entry point", description=description, location=ep.value)
        found.factories[ep.name] = (target, info)


def discover(
    builtins: dict[str, Callable[[], Benchmark]] | None = None, kind: type[FolderBenchmark] = FolderBenchmark
) -> Discovery:
    """Everything the registry can see now (built-ins first; later sources never shadow earlier names).

    The grader passes its own built-ins and folder class (those that can draw test); the factories of entry points
    are the plugins' own, which `get_benchmark` here wraps in `PublicSplits`."""
    found = Discovery(factories={}, problems=[])
    for name, factory in (BUILTINS if builtins is None else builtins).items():
        info = BenchmarkInfo(name=name, source="builtin", description=factory().description)  # type: ignore[call-arg]
        found.factories[name] = (factory, info)
    _discover_entry_points(found)
    folder = os.environ.get(FOLDER_ENV)
    if folder:
        _discover_folder(Path(folder), found, kind)
    for problem in found.problems:
        log.warning(problem)
    return found


def list_benchmarks() -> list[str]:
    return sorted(discover().factories)


def describe_benchmarks() -> list[BenchmarkInfo]:
    """Name, source and description of every usable benchmark."""
    found = discover()
    return [found.factories[name][1] for name in sorted(found.factories)]


def registry_problems() -> list[str]:
    """Broken definitions (with their paths) and empty folders, for `rlloop benchmarks` to show."""
    return discover().problems


def resolve(name: str, found: Discovery) -> Benchmark:
    """The benchmark `name` from `found`, checked against the protocol (an unknown name lists the known ones)."""
    if name not in found.factories:
        known = ", ".join(sorted(found.factories))
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; known: {known} (see `rlloop benchmarks`)")
    bench = found.factories[name][0]()
    if not isinstance(bench, Benchmark):
        raise TypeError(
            f"benchmark {name!r} does not implement the Benchmark protocol (name, load, score, ...)"
        )
    return bench


def get_benchmark(name: str) -> Benchmark:
    """A benchmark's public part: train and valid splits, prompts and scoring; `load("test")` raises."""
    if name in BUILTINS:
        return BUILTINS[name]()
    found = discover()
    bench = resolve(name, found)
    if found.factories[name][1].source == "entry point":
        return PublicSplits(bench)  # type: ignore[return-value]
    return bench


def write_jsonl(path: Path, samples: list[Sample]) -> None:
    """Write samples as `{"id","prompt","answer"}` lines, atomically."""
    atomic_write_lines(
        path, (json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) for s in samples)
    )
