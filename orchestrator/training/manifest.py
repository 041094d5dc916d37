"""The reproducibility manifest of a run: what ran, on what, with which inputs.

``write_manifest`` records package versions, Python and platform, CUDA, driver and GPU names (from
the probe), seeds, the training config, the sha256 of every source-of-truth file, the model id,
the LLM request ids and the workspace's git commit, as one JSON file; for a SLURM run also the sbatch
options used, each with where it came from, and (``record_jobs``) every job of the run's chain.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
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
