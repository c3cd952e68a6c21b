"""Benchmarks are one kind of extension, in one `tasks.plugins.Registry` (`BENCHMARKS`) like every other kind:
built-ins, Python entry points (`rlloop.benchmarks`) and a folder of definitions, rescanned at every lookup that
needs it. A folder definition (`RLLOOP_BENCHMARKS_DIR/<name>/benchmark.yaml`) names a Python scoring module beside
it:

    name: parity
    description: Is the number even or odd?
    module: scoring.py        # defines score(completion, sample) -> float; optionally load(split) -> list[Sample]
    max_new_tokens: 4
    stop: ["\\n"]

Without `load`, splits are read from `train.jsonl`, `valid.jsonl`, `test.jsonl` beside the YAML
(`{"id","prompt","answer"}` lines). A broken definition is reported with its path and skipped; it never hides the
others. An unknown name is the registry's `UnknownPluginError`, listing the known ones.

The registry holds each plugin's own object, test split and all; `get_benchmark` here is the trainers' and the
trainer image's view, which refuses `load("test")` (`HeldOutSplitError`). The grader resolves the same entries to
benchmarks that can draw test (grader/benchmarks/registry.py: a built-in's test half subclasses its public class).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.arith import ArithBenchmark
from tasks.arith_variants import (
    ArithFewBenchmark,
    ArithMessyBenchmark,
    ArithNoisyBenchmark,
    ArithVerboseBenchmark,
)
from tasks.atomic import atomic_write_lines
from tasks.base import Benchmark, Sample, Split, public_split
from tasks.countdown import CountdownBenchmark
from tasks.frozenlake import FrozenLakeBenchmark
from tasks.gsm8k import GSM8KBenchmark
from tasks.humaneval import HumanEvalBenchmark
from tasks.plugins import Found, Registry
from tasks.sokoban import SokobanBenchmark, SokobanOneBoxBenchmark

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rlloop.benchmarks"
FOLDER_ENV = "RLLOOP_BENCHMARKS_DIR"
BUILTINS: dict[str, Callable[[], Benchmark]] = {
    "arith": ArithBenchmark,
    "arith-noisy": ArithNoisyBenchmark,
    "arith-few": ArithFewBenchmark,
    "arith-verbose": ArithVerboseBenchmark,
    "arith-messy": ArithMessyBenchmark,
    "gsm8k": GSM8KBenchmark,
    "countdown": CountdownBenchmark,
    "frozenlake": FrozenLakeBenchmark,
    "sokoban": SokobanBenchmark,
    "sokoban1": SokobanOneBoxBenchmark,
    "humaneval": HumanEvalBenchmark,
}

# a class or function that makes the benchmark (a plugin's: test split and all)
BenchmarkFactory = Callable[[], Any]
Source = Literal["builtin", "entry point", "path", "registered"]
DEFINITION = "definition "  # the origin of a folder definition: "definition <folder>"
ENTRY_POINT = "entry point "  # the origin the registry gives an entry point: "entry point <module:object>"


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
    """A benchmark defined by a folder: YAML metadata plus a Python scoring module. It reads every split, test
    included (the grader's view); `get_benchmark` shows trainers its public splits only."""

    def __init__(self, definition: BenchmarkDefinition, folder: Path, module: ModuleType) -> None:
        self.name = definition.name
        self.description = definition.description
        self.max_new_tokens = definition.max_new_tokens
        self.stop = list(definition.stop)
        self.folder = folder
        self._module = module

    def load(self, split: Split) -> list[Sample]:
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


def _load_definition(folder: Path) -> FolderBenchmark:
    yaml_path = folder / "benchmark.yaml"
    raw: Any = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    definition = BenchmarkDefinition.model_validate(raw)
    module_path = (folder / definition.module).resolve()
    if folder.resolve() not in module_path.parents or not module_path.is_file():
        raise FileNotFoundError(f"module {definition.module!r} is not a file inside the definition folder")
    module = _load_module(module_path, definition.name)
    if not callable(getattr(module, "score", None)):
        raise AttributeError(f"{definition.module} defines no score(completion, sample) function")
    return FolderBenchmark(definition, folder, module)


def _short_reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "benchmark.yaml"
        return f"{where}: {first['msg']}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _folder_definitions() -> Found[BenchmarkFactory]:
    """The definitions in `RLLOOP_BENCHMARKS_DIR`, read now (the registry's rescanned source)."""
    found: Found[BenchmarkFactory] = Found()
    value = os.environ.get(FOLDER_ENV)
    if not value:
        return found
    root = Path(value)
    if not root.is_dir():
        found.problems.append(
            f"{FOLDER_ENV}={root} is not a folder; point it at a folder of benchmark definitions"
        )
        return found
    folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "benchmark.yaml").is_file())
    if not folders:
        found.problems.append(f"{root} holds no benchmark definitions (no */benchmark.yaml)")
    for folder in folders:
        try:
            bench = _load_definition(folder)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything; report and move on
            found.problems.append(f"skipped broken benchmark definition {folder}: {_short_reason(exc)}")
            continue
        if bench.name in found.entries:
            found.problems.append(f"skipped {folder}: benchmark name {bench.name!r} is already taken")
            continue
        found.entries[bench.name] = (lambda b=bench: b, f"{DEFINITION}{folder}")  # type: ignore[misc]
    for problem in found.problems:
        log.warning(problem)
    return found


def _register_builtins() -> None:
    for name, factory in BUILTINS.items():
        BENCHMARKS.register(name, factory)


BENCHMARKS: Registry[BenchmarkFactory] = Registry(
    "benchmark",
    ENTRY_POINT_GROUP,
    builtins=_register_builtins,
    rescan=_folder_definitions,
    hint="see `rlloop benchmarks`",
)


def is_builtin(name: str) -> bool:
    """Whether `name` is a built-in benchmark (whose test split only the grader's own class can draw)."""
    return name in BUILTINS and BENCHMARKS.get(name) is BUILTINS[name]


def make_benchmark(name: str) -> Any:
    """The object the registry's entry for `name` makes, checked against the protocol (an unknown name raises
    `UnknownPluginError`, listing the known ones)."""
    bench = BENCHMARKS.get(name)()
    if not isinstance(bench, Benchmark):
        raise TypeError(
            f"benchmark {name!r} does not implement the Benchmark protocol (name, load, score, ...)"
        )
    return bench


def get_benchmark(name: str) -> Benchmark:
    """A benchmark's public part: train and valid splits, prompts and scoring; `load("test")` raises."""
    bench = make_benchmark(name)
    if is_builtin(name):
        return bench  # type: ignore[no-any-return]
    return PublicSplits(bench)  # type: ignore[return-value]


def list_benchmarks() -> list[str]:
    return BENCHMARKS.names()


def describe_benchmarks() -> list[BenchmarkInfo]:
    """Name, source and description of every usable benchmark."""
    return [_info(name, entry, origin) for name, entry, origin in BENCHMARKS.entries()]


def _info(name: str, entry: BenchmarkFactory, origin: str) -> BenchmarkInfo:
    source: Source
    if entry is BUILTINS.get(name):
        source, where = "builtin", ""
    elif origin.startswith(ENTRY_POINT):
        source, where = "entry point", origin.removeprefix(ENTRY_POINT)
    elif origin.startswith(DEFINITION):
        source, where = "path", origin.removeprefix(DEFINITION)
        entry = entry()  # the definition's object holds its description
    else:
        source, where = "registered", origin
    description = str(getattr(entry, "description", ""))
    return BenchmarkInfo(name=name, source=source, description=description, location=where)


def registry_problems() -> list[str]:
    """Broken plugins and definitions (with their entry points or paths) and empty folders, for `rlloop benchmarks`."""
    return BENCHMARKS.problems()


def write_jsonl(path: Path, samples: list[Sample]) -> None:
    """Write samples as `{"id","prompt","answer"}` lines, atomically."""
    atomic_write_lines(
        path, (json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) for s in samples)
    )
