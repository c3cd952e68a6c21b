"""The recipes as data (`trainers.catalog`): what a run writes into its folder so the service's pages never import
a trainer, and what they read back from it."""

from __future__ import annotations

from pathlib import Path

from trainers.catalog import CATALOG_NAME, RecipeCatalog, write_catalog
from trainers.registry import get_recipe, list_recipes


def test_every_recipe_is_described_with_its_schema_defaults_and_source(tmp_path: Path) -> None:
    written = write_catalog(tmp_path / CATALOG_NAME)
    catalog = RecipeCatalog.model_validate_json((tmp_path / CATALOG_NAME).read_text())
    assert catalog == written
    assert sorted(catalog.recipes) == sorted(r.name for r in list_recipes())
    sft = catalog.recipes["sft"]
    config = get_recipe("sft").config_class
    assert sft.config_schema == config.model_json_schema()
    assert sft.defaults["learning_rate"] == config.model_fields["learning_rate"].default
    assert "model_path" not in sft.defaults  # required fields have no default to compare with
    assert sft.source_name == "sft.py" and "def run_sft" in sft.source
