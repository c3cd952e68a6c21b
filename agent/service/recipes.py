"""The recipes as the pages see them: data (`trainers.catalog`), never the trainer modules themselves.

Importing a recipe imports torch, TRL, transformers and datasets (15 s in a fresh process on a loaded machine), so a
service that imported one to draw a page would keep its first reviewer waiting. A research run writes its catalog
into its folder when it starts (run_dir/recipes.json); a run from before that file existed gets the service's own,
described once by a child process (`python -m trainers.catalog`) in the background while its page says so.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from sandbox import untrusted
from trainers.catalog import CATALOG_NAME, RecipeCatalog, RecipeInfo

logger = logging.getLogger("rlloop.service")
CATALOG_BYTES = 16 * 1024 * 1024
DESCRIBE_TIMEOUT_S = 300.0
WAITING_NOTE = (
    "the recipes' defaults, code and edit form are being read (this run has no recipes.json, from before runs "
    "recorded it); they appear here by themselves in a few seconds"
)


def run_catalog(run_dir: Path) -> RecipeCatalog | None:
    """The catalog the run wrote when it started (host-written, read without following links); None without one."""
    try:
        text = untrusted.read_text(run_dir, CATALOG_NAME, max_bytes=CATALOG_BYTES)
    except (OSError, ValueError):
        return None
    try:
        return RecipeCatalog.model_validate_json(text)
    except ValueError:
        logger.warning("%s: not a recipe catalog; using the service's own", run_dir / CATALOG_NAME)
        return None


class ServiceRecipes:
    """The service's own catalog, described in a child process on first need; `get` never waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._catalog: RecipeCatalog | None = None
        self._thread: threading.Thread | None = None
        self.problem: str | None = None

    def get(self) -> RecipeCatalog | None:
        """The catalog when it is ready; else None, and it is being described (started here the first time)."""
        with self._lock:
            if self._catalog is not None or self.problem is not None:
                return self._catalog
            if self._thread is None:
                self._thread = threading.Thread(target=self._describe, name="recipe-catalog", daemon=True)
                self._thread.start()
            return None

    def wait(self, timeout: float | None = None) -> RecipeCatalog | None:
        """Block until the catalog is described (tests, and callers that must have it)."""
        self.get()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self._catalog

    def _describe(self) -> None:
        with tempfile.TemporaryDirectory(prefix="rlloop-recipes-") as scratch:
            out = Path(scratch) / CATALOG_NAME
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "trainers.catalog", str(out)],
                    capture_output=True,
                    text=True,
                    timeout=DESCRIBE_TIMEOUT_S,
                )
                if done.returncode != 0:
                    raise RuntimeError(
                        done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
                    )
                catalog = RecipeCatalog.model_validate_json(out.read_text())
            except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
                logger.warning("could not describe the recipes: %s", exc)
                with self._lock:
                    self.problem = f"the recipes could not be described: {exc}"
                return
        with self._lock:
            self._catalog = catalog


class RecipeView:
    """One run's recipes for its pages: the run's catalog, else the service's (with a note while it is read). Read
    on first use: a page that shows no recipe reads none."""

    def __init__(self, run_dir: Path, fallback: ServiceRecipes | None) -> None:
        self.run_dir = run_dir
        self.fallback = fallback
        self._recipes: dict[str, RecipeInfo] | None = None
        self._note: str | None = None

    def _load(self) -> dict[str, RecipeInfo]:
        if self._recipes is None:
            found = run_catalog(self.run_dir)
            if found is None and self.fallback is not None:
                found = self.fallback.get()
                if found is None:
                    self._note = self.fallback.problem or WAITING_NOTE
            self._recipes = found.recipes if found is not None else {}
        return self._recipes

    def get(self, name: str) -> RecipeInfo | None:
        return self._load().get(name)

    @property
    def note(self) -> str | None:
        """What the page should say about the recipes (being read, or could not be), once one was looked up."""
        return self._note
