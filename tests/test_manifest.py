"""The reproducibility manifest: every key, file hashes that hashlib agrees with, the same JSON on disk."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

from orchestrator.training.manifest import PACKAGES, package_versions, write_manifest
from orchestrator.training.machine import GPU, ProbeResult
from source_of_truth.grpo_config import GRPOConfig

SOURCE_OF_TRUTH = Path(__file__).resolve().parents[1] / "source_of_truth"


def probe_dict() -> dict:
    return ProbeResult(gpus=[GPU(0, "NVIDIA H100 80GB HBM3", 81559, 80000), GPU(1, "NVIDIA H100 80GB HBM3", 81559)],
                       cuda_version="12.4", driver_version="550.54.15", torch_version="2.13.0",
                       torch_cuda_available=True, slurm=False, slurm_partitions=[], slurm_info=None, cpu_count=16,
                       memory_total_gib=125.7, hostname="gpu-node", platform="Linux").to_dict()


def test_manifest_records_everything_and_is_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r1" / "manifest.json"
    config = GRPOConfig().to_dict()
    manifest = write_manifest(path, run_id="r1", config=config, model_id="Qwen/Qwen3-4B-Instruct-2507",
                              probe=probe_dict(), source_of_truth=SOURCE_OF_TRUTH, request_ids=["req_1", "req_2"],
                              seeds={"seed": 42}, workspace_sha="0123abc")

    assert {"run_id", "created", "python", "platform", "packages", "cuda_version", "driver_version", "gpus",
            "seeds", "model_id", "config", "source_of_truth", "request_ids", "workspace_sha"} <= manifest.keys()
    assert json.loads(path.read_text()) == manifest
    assert manifest["config"] == config and manifest["seeds"] == {"seed": 42}
    assert manifest["request_ids"] == ["req_1", "req_2"] and manifest["workspace_sha"] == "0123abc"
    assert manifest["gpus"] == ["NVIDIA H100 80GB HBM3"] * 2
    assert (manifest["cuda_version"], manifest["driver_version"]) == ("12.4", "550.54.15")
    assert set(manifest["packages"]) == set(PACKAGES)
    assert manifest["packages"]["torch"] == importlib.metadata.version("torch")

    files = sorted(p for p in SOURCE_OF_TRUTH.iterdir() if p.is_file())
    assert {"env_move.py", "grpo_config.py", "grpo_template.py"} <= manifest["source_of_truth"].keys()
    assert manifest["source_of_truth"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_workspace_sha_is_optional_and_missing_packages_are_none(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "manifest.json", run_id="r2", config={}, model_id="tiny",
                              probe={"gpus": []}, source_of_truth=SOURCE_OF_TRUTH / "grpo_config.py",
                              request_ids=[], seeds={})
    assert manifest["workspace_sha"] is None and manifest["gpus"] == [] and manifest["cuda_version"] is None
    assert list(manifest["source_of_truth"]) == ["grpo_config.py"]
    assert package_versions(("no-such-package-for-grpo",)) == {"no-such-package-for-grpo": None}


def test_the_manifest_records_what_the_job_really_ran_with(tmp_path: Path) -> None:
    from orchestrator.training.manifest import record_job_config, saved_job_config

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"config": {"max_action_tokens": 48, "seed": 1}}))
    checkpoint = tmp_path / "out" / "final"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text(json.dumps({"hidden_size": 8}))  # the model's, not the run's
    (checkpoint / "grpo_config.json").write_text(json.dumps({"max_action_tokens": 4, "seed": 1}))
    saved = saved_job_config(tmp_path / "out", {"max_action_tokens", "seed"})
    assert saved is not None and saved[0].name == "grpo_config.json"
    assert record_job_config(manifest, {"max_action_tokens": 48, "seed": 1}, *saved) == {"max_action_tokens": [48, 4]}
    assert json.loads(manifest.read_text())["job_config"] == {"max_action_tokens": 4, "seed": 1}
    assert saved_job_config(tmp_path / "missing", {"seed"}) is None


def test_the_manifest_lists_every_package_the_game_imports(tmp_path: Path) -> None:
    """`import pyspiel` is the open_spiel distribution; a package imported inside a function counts too; the
    standard library and the game's own modules do not."""
    from orchestrator.training.manifest import game_packages

    (tmp_path / "env_move.py").write_text("import os\nimport pyspiel\nfrom mpe2 import simple_spread_v3\nimport rules_here\n"
                                          "def make():\n    import gymnasium\n    return gymnasium\n")
    found = game_packages(tmp_path / "env_move.py")
    assert {"open-spiel", "mpe2", "gymnasium", "pettingzoo"} <= set(found)
    assert found["open-spiel"] == importlib.metadata.version("open_spiel")
    assert not {"os", "rules_here"} & set(found)
