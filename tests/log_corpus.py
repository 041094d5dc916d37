"""Log formats as researchers write them: each a `RunLogs.line` method for the Cleanup template (the GENERIC
logging of source_of_truth/grpo_template.py), put into the template and the reference train.py alike, so a
real runtime check writes train.logs that way; and the same method run on its own for fast parsing tests.

A method receives `kind` (start, train, eval, done) and the values the template logs (update, episode, loss,
gradNorm, kl, reward_mean, ..., eval_reward_mean on eval lines)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FORMATS: dict[str, str] = {
    "csv": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled or kind not in ("train", "eval"):
            return
        import csv
        columns = ["update", "episode", "loss", "gradNorm", "kl", "reward_mean", "reward_std",
                   "invalid_action_rate", "eval_reward_mean", "eval_invalid_action_rate"]
        new = not self.train_path.exists()
        with self.train_path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(values)
''',
    "tsv": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled or kind not in ("train", "eval"):
            return
        columns = ["phase", "step", "loss", "gradNorm", "kl", "reward", "invalid_action_rate"]
        row = {"phase": kind, "step": values["update"], "gradNorm": values.get("gradNorm"),
               "reward": values.get("reward_mean", values.get("eval_reward_mean")),
               "invalid_action_rate": values.get("invalid_action_rate", values.get("eval_invalid_action_rate")),
               "loss": values.get("loss"), "kl": values.get("kl")}
        new = not self.train_path.exists()
        with self.train_path.open("a") as fh:
            if new:
                fh.write("\\t".join(columns) + "\\n")
            fh.write("\\t".join("" if row[c] is None else str(row[c]) for c in columns) + "\\n")
''',
    "name value": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled or kind not in ("train", "eval"):
            return
        if kind == "train":
            names = ("update", "loss", "gradNorm", "kl", "reward_mean", "invalid_action_rate")
            text = " ".join(f"{name} {values[name]}" for name in names)
        else:
            text = f"eval update {values['update']} reward {values['eval_reward_mean']}"
        with self.train_path.open("a") as fh:
            fh.write(text + "\\n")
''',
    "logging prefix": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        import logging
        logger = logging.getLogger("grpo")
        if not logger.handlers:
            handler = logging.FileHandler(self.train_path)
            handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False
        pairs = " ".join(f"{k}={v}" for k, v in values.items() if isinstance(v, (int, float)))
        logger.info("%s", pairs if kind == "train" else f"{kind} {pairs}")
''',
    "tqdm postfix": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        if kind == "start":
            self.total = values["updates"]
        if kind not in ("train", "eval"):
            return
        postfix = ", ".join(f"{k}={v:.4g}" for k, v in values.items() if isinstance(v, float))
        tag = "" if kind == "train" else "eval "
        with self.train_path.open("a") as fh:
            fh.write(f"[{tag}{values['update']}/{self.total}] {postfix}\\n")
''',
    "json split": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        with self.train_path.open("a") as fh:
            fh.write(json.dumps({"split": kind, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **values}) + "\\n")
''',
    "key: value": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled or kind not in ("train", "eval"):
            return
        if kind == "train":
            names = ("loss", "gradNorm", "kl", "reward_mean", "invalid_action_rate")
            text = f"step: {values['update']}, " + ", ".join(f"{n.replace('_mean', '')}: {values[n]:.5f}" for n in names)
        else:
            text = f"[eval] step: {values['update']}, reward: {values['eval_reward_mean']:.5f}"
        with self.train_path.open("a") as fh:
            fh.write(text + "\\n")
''',
    "tensorboard only": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled or kind not in ("train", "eval"):
            return
        if getattr(self, "writer", None) is None:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(self.train_path.parent / "tb"))
        for key, value in values.items():
            if key != "update" and isinstance(value, (int, float)):
                self.writer.add_scalar(f"{kind}/{key.removeprefix(kind + '_')}", value, values["update"])
        self.writer.flush()
''',
}

# a format the first guess cannot read (no names, a bare table): learned from a sample by the LLM
LEARNED_ONLY = "fixed table"
LEARNED_FORMATS: dict[str, str] = {
    LEARNED_ONLY: '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled or kind not in ("train", "eval"):
            return
        with self.train_path.open("a") as fh:
            if kind == "train":
                fh.write(f"{values['update']:05d} | {values['loss']:+.6f} | {values['gradNorm']:.6f} | "
                         f"{values['reward_mean']:+.4f}\\n")
            else:
                fh.write(f"E{values['update']:04d} | {values['eval_reward_mean']:+.4f}\\n")
''',
}
_METHODS = {**FORMATS, **LEARNED_FORMATS}

_LINE_METHOD = re.compile(r"\n    def line\(self, kind: str, \*\*values: Any\) -> None:\n.*?\n(?=\n    def close)", re.S)


def with_format(text: str, name: str) -> str:
    """The Cleanup template (or its filled train.py) with RunLogs.line writing in format `name`."""
    changed, count = _LINE_METHOD.subn(lambda _: _METHODS[name].rstrip("\n"), text)
    assert count == 1, "the template's RunLogs.line method was not found"
    return changed


def format_variant(folder: Path, name: str) -> None:
    """Rewrite the template and train.py of a generated folder alike (GENERIC code stays identical)."""
    for file in ("grpo_template.py", "train.py"):
        path = folder / file
        path.write_text(with_format(path.read_text(), name))


def write_log(name: str, folder: Path, updates: int = 3, eval_every: int = 2) -> Path:
    """A run of `updates` updates logged in format `name` by the method alone; returns the train.logs path."""
    namespace: dict[str, Any] = {"Any": Any, "json": json, "time": time}
    exec("class RunLogs:" + _METHODS[name], namespace)
    logs = SimpleNamespace(enabled=True, train_path=folder / "train.logs")
    line = namespace["RunLogs"].line
    line(logs, "start", model="/tmp/tiny", processes=1, updates=updates, episodes=2 * updates)
    for u in range(1, updates + 1):
        line(logs, "train", **metrics(u))
        if u % eval_every == 0 or u == updates:
            line(logs, "eval", update=u, episode=2 * u, eval_reward_mean=0.5 + u / 10, eval_invalid_action_rate=0.25)
    line(logs, "done", updates=updates, episodes=2 * updates)
    if getattr(logs, "writer", None) is not None:
        logs.writer.close()
    return logs.train_path


def metrics(update: int) -> dict[str, Any]:
    """What the Cleanup template logs per update (a subset), distinct per update."""
    return {"update": update, "episode": 2 * update, "lr": 1e-6, "loss": 0.125 * update, "gradNorm": 0.5 + update,
            "kl": 0.001 * update, "reward_mean": -0.25 + update / 4, "reward_std": 0.5,
            "invalid_action_rate": 0.0625 * update, "step_time": 1.5}

