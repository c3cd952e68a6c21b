"""The generic registry: built-ins load lazily, names are checked with the list of choices, entry points register
objects or whole modules, and a broken plugin is reported without hiding the others."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tasks.plugins import Found, Registry, UnknownPluginError


def _dist(root: Path, group: str, lines: list[str]) -> None:
    """A distribution on sys.path that declares `lines` in `group`, as `pip install` would leave it."""
    info = root / "rlloop_test_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloop-test-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")


def test_builtins_load_on_first_use_and_unknown_names_list_the_choices() -> None:
    calls: list[int] = []
    registry: Registry[int] = Registry(
        "widget", "rlloop.test-widgets", reserved=("auto",), hint="see widgets"
    )

    def builtins() -> None:
        calls.append(1)
        registry.register("one", 1)

    registry._builtins = builtins
    assert calls == []
    assert registry.get("one") == 1 and registry.names() == ["one"] and calls == [1]
    assert registry.choices() == ["auto", "one"]
    assert registry.check("auto") == "auto"
    with pytest.raises(
        UnknownPluginError, match=r"unknown widget 'two': choose one of auto, one \(see widgets\)"
    ):
        registry.get("two")
    with pytest.raises(ValueError, match="rlloop.test-widgets"):
        registry.check("two")


def test_a_taken_name_needs_replace_and_reserved_names_cannot_be_registered() -> None:
    registry: Registry[object] = Registry("widget", "rlloop.test-widgets", reserved=("auto",))
    first, second = object(), object()
    registry.register("w", first)
    registry.register("w", first)  # the same entry again (a module imported twice) is harmless
    with pytest.raises(ValueError, match="already registered"):
        registry.register("w", second)
    registry.register("w", second, replace=True)
    assert registry.get("w") is second
    with pytest.raises(ValueError, match="reserved"):
        registry.register("auto", first)

    @registry.register("decorated")
    def make() -> str:
        return "made"

    assert registry.get("decorated") is make


def test_entry_points_register_objects_and_modules_and_broken_ones_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "rlloop.test-gadgets"
    pkg = tmp_path / "gadget_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("GADGET = 'a gadget'\n")
    (pkg / "several.py").write_text(
        textwrap.dedent(
            """
            from tests.tasks.test_plugins import GADGETS
            GADGETS.register("left", "L")
            GADGETS.register("right", "R")
            """
        )
    )
    _dist(
        tmp_path, group, ["single = gadget_plugin:GADGET", "both = gadget_plugin.several", "bad = nowhere:x"]
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    global GADGETS
    GADGETS = Registry("gadget", group)
    try:
        assert GADGETS.names() == ["left", "right", "single"]
        assert GADGETS.get("single") == "a gadget"
        assert GADGETS.origin("single") == "entry point gadget_plugin:GADGET"
        (problem,) = GADGETS.problems()
        assert "bad = nowhere:x" in problem and "ModuleNotFoundError" in problem
    finally:
        for name in ("gadget_plugin", "gadget_plugin.several"):
            sys.modules.pop(name, None)


def test_a_rescanned_source_is_read_at_each_lookup_and_never_shadows() -> None:
    """How benchmark folder definitions join the registry: read again whenever a lookup needs them."""
    shelf: dict[str, tuple[str, str]] = {"made": ("M", "folder /a"), "one": ("shadow", "folder /b")}
    registry: Registry[str] = Registry(
        "widget", "rlloop.test-widgets", rescan=lambda: Found(dict(shelf), ["folder /c is broken"])
    )
    registry.register("one", "1")
    assert registry.names() == ["made", "one"] and "made" in registry and registry.get("made") == "M"
    assert registry.get("one") == "1" and registry.origin("made") == "folder /a"
    assert registry.check("made") == "made"
    problems = registry.problems()
    assert "folder /c is broken" in problems and any("folder /b" in p and "'one'" in p for p in problems)
    del shelf["made"]
    assert "made" not in registry and registry.names() == ["one"]
    with pytest.raises(UnknownPluginError, match="unknown widget 'made'"):
        registry.get("made")


def test_reload_reads_the_entry_points_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry: Registry[str] = Registry("thing", "rlloop.test-things", builtins=lambda: None)
    registry.register("kept", "K")
    assert registry.names() == ["kept"]
    (tmp_path / "thing_plugin.py").write_text("THING = 'a thing'\n")
    _dist(tmp_path, "rlloop.test-things", ["late = thing_plugin:THING"])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert registry.names() == ["kept"]  # loaded once: a plugin installed later is not seen ...
        registry.reload()
        assert registry.names() == ["kept", "late"]  # ... until the registry reloads
        monkeypatch.undo()
        registry.reload()
        assert registry.names() == ["kept"]
    finally:
        sys.modules.pop("thing_plugin", None)


GADGETS: Registry[str] = Registry("gadget", "rlloop.test-gadgets")


def test_a_registry_below_its_builtins_is_handed_them_by_their_own_group_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built-ins named in `builtins_group` register before the plugins' group, so a plugin named like one of them
    is skipped, not the built-in; an empty group says how to mend it wherever a name is looked up."""
    registry: Registry[str] = Registry(
        "tool", "rlloop.test-tools", builtins_group="rlloop.test-builtin-tools"
    )
    (tmp_path / "tool_builtins.py").write_text(
        textwrap.dedent(
            """
            def register():
                from tests.tasks.test_plugins import TOOLS
                TOOLS.register("hammer", "the built-in hammer")
            """
        )
    )
    (tmp_path / "tool_plugin.py").write_text("HAMMER = 'a plugin hammer'\nSAW = 'a saw'\n")
    info = tmp_path / "rlloop_test_tools-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloop-test-tools\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[rlloop.test-builtin-tools]\nown = tool_builtins:register\n"
        "[rlloop.test-tools]\nhammer = tool_plugin:HAMMER\nsaw = tool_plugin:SAW\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(globals(), "TOOLS", registry)
    try:
        assert registry.names() == ["hammer", "saw"]
        assert registry.get("hammer") == "the built-in hammer" and registry.get("saw") == "a saw"
        assert any("skipped entry point hammer" in p for p in registry.problems())
    finally:
        for module in ("tool_builtins", "tool_plugin"):
            sys.modules.pop(module, None)

    empty: Registry[str] = Registry("gizmo", "rlloop.test-gizmos", builtins_group="rlloop.test-no-such-group")
    assert empty.names() == []
    assert any("'rlloop.test-no-such-group' is empty" in p for p in empty.problems())
    with pytest.raises(ValueError, match="reinstall it"):
        empty.check("anything")
