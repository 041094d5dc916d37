"""Shared fixtures: the tiny model (built once per session) and the reference generated set."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_OF_TRUTH = ROOT / "source_of_truth"
REFERENCE = ROOT / "tests" / "fixtures" / "reference_generated"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from orchestrator.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def copy_generated_set(dest: Path) -> Path:
    """The source of truth plus the reference generated files, as a run's generated/ folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in [*SOURCE_OF_TRUTH.glob("*.py"), *REFERENCE.iterdir()]:
        shutil.copy2(src, dest / src.name)
    return dest


@pytest.fixture
def generated_dir(tmp_path: Path) -> Path:
    return copy_generated_set(tmp_path / "generated")


@pytest.fixture(scope="session")
def reference_train():
    """The reference train.py imported as a module (its GENERIC part is the template's)."""
    for folder in (SOURCE_OF_TRUTH, REFERENCE):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    import train

    return train
