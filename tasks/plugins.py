"""One registry for every extension point: sandboxes, proposers, engines, sweep executors, recipes, benchmarks.

A `Registry` maps a name to an entry (a factory, or an object such as a `Recipe`). Entries come from three places,
in this order, and a later one never shadows an earlier name:

1. built-ins, registered lazily by `builtins` (a function that imports the modules that call `register`), so that
   naming a registry costs nothing until it is used; or, for a registry that lives below the code of its built-ins
   (the proposers, above the run's config that names them), by the functions that the distribution's own entry
   point group `builtins_group` names, so the registry's module imports nothing above it;
2. code that calls `register` (a test, an application embedding rlloop);
3. Python entry points in the registry's group (`rlloop.sandboxes`, `rlloop.recipes`, ...). An entry point may
   name an object, registered under the entry point's name, or a module, whose import is its registration (so one
   plugin module can register several entries);
4. a `rescan` source, read again whenever a lookup needs it (benchmark definitions in a folder that an env var
   names, which may change while the process lives).

A broken plugin is reported (`problems`) and skipped; it never hides the others. An unknown name raises
`UnknownPluginError`, whose message lists what is registered, so config fields can keep plain strings and check
them with `check`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, Generic, TypeVar, overload

log = logging.getLogger("rlloop.plugins")

T = TypeVar("T")


class UnknownPluginError(KeyError, ValueError):
    """A name nobody registered (a KeyError for lookups, a ValueError for config checks); the message lists the
    registered names and where to look."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class Found(Generic[T]):
    """What a `rescan` source found: entries by name, each with its origin, and what it had to skip, and why."""

    entries: dict[str, tuple[T, str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


class Registry(Generic[T]):
    """Names to entries of one kind, filled from built-ins, `register` calls, entry points and a `rescan` source."""

    def __init__(
        self,
        kind: str,
        group: str,
        *,
        builtins: Callable[[], None] | None = None,
        builtins_group: str | None = None,
        rescan: Callable[[], Found[T]] | None = None,
        reserved: Iterable[str] = (),
        hint: str = "",
    ) -> None:
        self.kind = kind  # "sandbox", "recipe", ...: used in messages
        self.group = group  # the entry point group plugins declare
        self.reserved = tuple(reserved)  # names a config may hold that are not entries, such as "auto"
        self.hint = hint  # where a user can see the list, e.g. "see `rlloop sandbox list`"
        self._builtins = builtins
        self._builtins_group = builtins_group
        self._missing_builtins = ""  # why the built-ins are not here, when their entry point group is empty
        self._rescan = rescan
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._problems: list[str] = []
        self._loaded = False
        self._lock = threading.RLock()

    @overload
    def register(self, name: str, entry: T, *, replace: bool = False, origin: str = "") -> T: ...

    @overload
    def register(
        self, name: str, entry: None = None, *, replace: bool = False, origin: str = ""
    ) -> Callable[[T], T]: ...

    def register(
        self, name: str, entry: T | None = None, *, replace: bool = False, origin: str = ""
    ) -> T | Callable[[T], T]:
        """Add `entry` under `name` (or use as a decorator). A different entry under a taken name is an error
        unless `replace`; registering the same entry twice is harmless (a module imported twice)."""
        if entry is None:
            return lambda e: self.register(name, e, replace=replace, origin=origin)
        if not name or name in self.reserved:
            raise ValueError(f"{name!r} cannot name a {self.kind}: it is empty or reserved ({self.reserved})")
        with self._lock:
            existing = self._entries.get(name)
            if existing is not None and existing is not entry and not replace:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({self._origins.get(name) or 'built-in'}); "
                    "pass replace=True to override it"
                )
            self._entries[name] = entry
            self._origins[name] = origin or getattr(entry, "__module__", "") or "registered"
        return entry

    def unregister(self, name: str) -> None:
        """Forget `name` (tests that register a temporary entry)."""
        with self._lock:
            self._entries.pop(name, None)
            self._origins.pop(name, None)

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True  # before loading: a built-in module that looks itself up must not recurse
            if self._builtins is not None:
                self._builtins()
            if self._builtins_group is not None:
                self._load_builtins_group(self._builtins_group)
            self._load_entry_points()
        for problem in self._problems:
            log.warning(problem)

    def _load_builtins_group(self, group: str) -> None:
        """Call each function the group names (it registers the built-ins); an empty group means the installed
        metadata predates it, which a reinstall mends: said in the problems and in every unknown-name message."""
        found = sorted(entry_points(group=group), key=lambda e: e.name)
        if not found:
            self._missing_builtins = (
                f"no built-in {self.kind}s: the entry point group {group!r} is empty (rlloop's installed metadata "
                "is missing or older than its pyproject.toml: reinstall it, `make install` or `pip install -e .`)"
            )
            self._problems.append(self._missing_builtins)
        for ep in found:
            ep.load()()

    def _load_entry_points(self) -> None:
        for ep in sorted(entry_points(group=self.group), key=lambda e: e.name):
            if ep.name in self._entries:
                self._problems.append(
                    f"skipped entry point {ep.name} = {ep.value}: {self.kind} {ep.name!r} is already registered"
                )
                continue
            try:
                target = ep.load()
                if not isinstance(target, ModuleType):
                    self.register(ep.name, target, origin=f"entry point {ep.value}")
                else:
                    self._origins.setdefault(ep.name, f"entry point {ep.value}")
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the registry
                first = str(exc).splitlines()[0] if str(exc) else ""
                self._problems.append(
                    f"skipped broken {self.kind} plugin {ep.name} = {ep.value}: {type(exc).__name__}: {first}"
                )

    def reload(self) -> None:
        """Load the entry points again on next use (a plugin installed while this process runs); built-ins and
        entries registered in code stay."""
        with self._lock:
            for name in [n for n, origin in self._origins.items() if origin.startswith("entry point ")]:
                self._entries.pop(name, None)
                self._origins.pop(name, None)
            self._problems = []
            self._loaded = False

    def _scanned(self) -> Found[T]:
        """What the `rescan` source holds now, less the names taken by the other sources."""
        if self._rescan is None:
            return Found()
        found = self._rescan()
        kept: Found[T] = Found(problems=list(found.problems))
        for name, (entry, origin) in found.entries.items():
            if name in self._entries:
                kept.problems.append(f"skipped {origin}: {self.kind} {name!r} is already registered")
            else:
                kept.entries[name] = (entry, origin)
        return kept

    def names(self) -> list[str]:
        """Every registered name, sorted (reserved names such as "auto" not included)."""
        self._load()
        return sorted({*self._entries, *self._scanned().entries})

    def entries(self) -> list[tuple[str, T, str]]:
        """Every entry with its name and origin, sorted by name (the `rescan` source read once)."""
        self._load()
        scanned = self._scanned().entries
        found = {
            **scanned,
            **{name: (entry, self._origins.get(name, "")) for name, entry in self._entries.items()},
        }
        return [(name, *found[name]) for name in sorted(found)]

    def choices(self) -> list[str]:
        """What a config field may hold: the reserved names, then the registered ones."""
        return [*self.reserved, *self.names()]

    def problems(self) -> list[str]:
        """Plugins that could not be loaded, each with its entry point (or rescanned source) and why."""
        self._load()
        return [*self._problems, *self._scanned().problems]

    def origin(self, name: str) -> str:
        """Where `name` came from: its module, the entry point that declared it, or its rescanned source."""
        self._load()
        if name in self._entries:
            return self._origins.get(name, "")
        scanned = self._scanned().entries
        if name in scanned:
            return scanned[name][1]
        raise UnknownPluginError(self.unknown_message(name))

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries or (isinstance(name, str) and name in self._scanned().entries)

    def get(self, name: str) -> T:
        """The entry called `name`; `UnknownPluginError` lists the registered names otherwise."""
        self._load()
        if name in self._entries:
            return self._entries[name]
        scanned = self._scanned().entries
        if name in scanned:
            return scanned[name][0]
        raise UnknownPluginError(self.unknown_message(name))

    def check(self, name: str) -> str:
        """`name` if a config may hold it (registered or reserved), else `ValueError` saying what may: for pydantic
        validators, so a bad name fails when the config is read, with the list of choices."""
        if name in self.reserved or name in self:
            return name
        raise ValueError(self.unknown_message(name))

    def unknown_message(self, name: str) -> str:
        known = ", ".join(self.choices()) or "none"
        hint = f" ({self.hint})" if self.hint else ""
        plugins = f"; plugins add more through the {self.group!r} entry point group"
        missing = f"; {self._missing_builtins}" if self._missing_builtins else ""
        return f"unknown {self.kind} {name!r}: choose one of {known}{hint}{plugins}{missing}"


def registered(registry: Callable[[], Registry[Any]]) -> Callable[[str], str]:
    """A pydantic `AfterValidator` body for a field that names a registry entry: `registry()` is called only when a
    value is checked (registries import their plugins), and a bad name fails with the registered ones listed."""

    def check(name: str) -> str:
        return registry().check(name)

    return check


def registered_list(registry: Callable[[], Registry[Any]]) -> Callable[[str | None], str | None]:
    """Like `registered`, for a comma list of names (each checked; an empty list is None)."""

    def check(value: str | None) -> str | None:
        if value is None:
            return None
        names = [registry().check(name.strip()) for name in value.split(",") if name.strip()]
        return ",".join(names) or None

    return check
