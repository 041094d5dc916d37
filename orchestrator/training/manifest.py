"""The reproducibility manifest of a run: what ran, on what, with which inputs.

``write_manifest`` records package versions (the training stack's, and every package the game imports:
``game_packages``, read from env_move.py's imports and the packages those require), Python and platform,
CUDA, driver and GPU names (from the probe), seeds, the training config, the sha256 of every source-of-truth file, the model id,
the LLM request ids and the workspace's git commit, as one JSON file; for a SLURM run also the sbatch
options used, each with where it came from, and (``record_jobs``) every job of the run's chain.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import re
import platform
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.base.files import project_root_of, same_place

PACKAGES = ("torch", "transformers", "accelerate", "anthropic", "langgraph", "gitpython", "tenacity")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions; None for a package that is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def imported_modules(source: str) -> list[str]:
    """The top-level names of the modules a Python file imports (anywhere in it), outside the standard library;
    relative imports aside."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return [n for n in dict.fromkeys(names) if n not in sys.stdlib_module_names and n != "__future__"]


def game_packages(env_move: Path) -> dict[str, str | None]:
    """Every installed distribution the game imports (`import pyspiel` is open_spiel), with the distributions
    those require, by name and version; a module no distribution provides (a file beside the game) is left out."""
    try:
        source = env_move.read_text()
    except OSError:
        return {}
    providers = importlib.metadata.packages_distributions()
    found: dict[str, str | None] = {}
    for module in imported_modules(source):
        for dist in providers.get(module, []):
            found.update(_with_requirements(dist))
    return dict(sorted(found.items()))


def _with_requirements(dist: str) -> dict[str, str | None]:
    """`dist` and the distributions it requires (no extras, installed ones), with their versions."""
    try:
        found = {normalised(dist): importlib.metadata.version(dist)}
        requires = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    for requirement in requires:
        if "extra ==" in requirement:
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        if name:
            found.update({normalised(name.group(0)): v for v in [package_versions((name.group(0),))[name.group(0)]] if v})
    return found


def normalised(name: str) -> str:
    """A distribution's name as the registry compares it (PEP 503): `open_spiel` and `Open-Spiel` are `open-spiel`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_hashes(source_of_truth: Path) -> dict[str, str]:
    """sha256 of each file in the source-of-truth folder (or of the one file given), by file name."""
    files = [source_of_truth] if source_of_truth.is_file() else sorted(p for p in source_of_truth.iterdir()
                                                                       if p.is_file())
    return {p.name: sha256_of(p) for p in files}


def _hardware(probe: dict[str, Any]) -> dict[str, Any]:
    return {
        "cuda_version": probe.get("cuda_version"),
        "driver_version": probe.get("driver_version"),
        "gpus": [gpu.get("name") for gpu in probe.get("gpus", [])],
        "hostname": probe.get("hostname"),
    }


def write_manifest(path: Path, *, run_id: str, config: dict, model_id: str, probe: dict, source_of_truth: Path,
                   request_ids: list[str], seeds: dict, workspace_sha: str | None = None,
                   slurm: dict | None = None) -> dict:
    """Write the manifest as JSON to ``path`` and return it; ``probe`` is a ``ProbeResult.to_dict()``."""
    manifest = {
        "run_id": run_id,
        "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "game_packages": game_packages(Path(source_of_truth) / "env_move.py") if Path(source_of_truth).is_dir() else {},
        **_hardware(probe),
        "seeds": seeds,
        "model_id": model_id,
        "config": config,
        "source_of_truth": source_hashes(Path(source_of_truth)),
        "request_ids": list(request_ids),
        "workspace_sha": workspace_sha,
        **({"slurm": slurm} if slurm is not None else {}),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# file names a training run saves that are not its training config
_NOT_TRAINING_CONFIGS = {"config.json", "generation_config.json", "tokenizer_config.json", "adapter_config.json",
                         "preprocessor_config.json", "special_tokens_map.json"}


def saved_job_config(folder: Path, fields: set[str]) -> tuple[Path, dict] | None:
    """The training config a job saved below `folder` (a JSON object whose keys are mostly the config's
    fields, e.g. a checkpoint's grpo_config.json), the newest one; None when it saved none."""
    found = []
    for path in Path(folder).rglob("*.json") if Path(folder).is_dir() else []:
        if path.name in _NOT_TRAINING_CONFIGS or "config" not in path.name:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and fields and 2 * len(fields & set(data)) >= len(fields):
            found.append((path.stat().st_mtime, path, data))
    return max(found, key=lambda item: item[0])[1:] if found else None


def record_job_config(path: Path, planned: dict, saved: Path, ran: dict) -> dict:
    """Add what the job really ran with to the manifest at `path` (runs/RUN/formal-N/manifest.json); return the
    fields where it differs from the plan ({field: [planned, ran]}). A folder of the plan that the job wrote down
    under another project root (the project was copied or moved after it ran) is the same folder."""
    root = project_root_of(Path(path).parent.parent)
    differs = {k: [planned[k], ran[k]] for k in planned
               if k in ran and ran[k] != planned[k] and not same_place(planned[k], ran[k], root)}
    manifest = json.loads(Path(path).read_text())
    manifest.update(job_config=ran, job_config_file=str(saved), job_config_differs=differs)
    Path(path).write_text(json.dumps(manifest, indent=2) + "\n")
    return differs


def record_jobs(path: Path, jobs: list[dict]) -> None:
    """Add the jobs the run took (orchestrator.training.chain's segments: cause, SLURM id, ending, nodes) to the manifest."""
    manifest = json.loads(Path(path).read_text())
    manifest["jobs"] = jobs
    Path(path).write_text(json.dumps(manifest, indent=2) + "\n")
