"""A cheap static check of an agent-written `train.py` before any sandbox time is spent on it."""

from __future__ import annotations


def check_code(train_py: str, filename: str = "train.py") -> str | None:
    """None if the script compiles; else one line naming the error, its line and the offending source line.

    `compile` (not just `ast.parse`) also catches errors found after parsing, such as `return` outside a function.
    """
    if not train_py.strip():
        return f"{filename} is empty: write a complete script that trains and saves a checkpoint"
    try:
        compile(train_py, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        source = (exc.text or "").strip()
        shown = f": {source}" if source else ""
        return f"{type(exc).__name__} in {filename} at {where}: {exc.msg}{shown}"
    except ValueError as exc:  # e.g. NUL bytes in the source
        return f"{filename} cannot be compiled: {exc}"
    return None
