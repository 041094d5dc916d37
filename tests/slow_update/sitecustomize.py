"""Test-only: with TEST_SLOW_UPDATE_S set, every AdamW step of a training process lasts that many seconds more.

An update of a real model on a cluster takes minutes; the tiny agent's takes a second. On the PYTHONPATH of the
orchestrator processes tests/test_slurm_endings.py starts (their SLURM jobs inherit it: sbatch passes the
environment on), it makes a formal run outlast SLURM's shortest time limit (one minute) while leaving the
machine's CPUs to other work. The numbers trained are untouched: the step runs, then the process waits."""

import importlib.abc
import importlib.util
import os
import sys
import time

SECONDS = float(os.environ.get("TEST_SLOW_UPDATE_S") or 0)


class _SlowAdamW(importlib.abc.MetaPathFinder):
    """When torch.optim.adamw is imported, its AdamW.step is wrapped (the class torch's own optimizers use)."""

    def find_spec(self, name, path, target=None):
        if name != "torch.optim.adamw":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_slowed(module):
            exec_module(module)
            step = module.AdamW.step

            def slow_step(self, *args, **kwargs):
                result = step(self, *args, **kwargs)
                time.sleep(SECONDS)
                return result

            module.AdamW.step = slow_step

        spec.loader.exec_module = exec_slowed
        return spec


if SECONDS > 0:
    sys.meta_path.insert(0, _SlowAdamW())
