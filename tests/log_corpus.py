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

# trainers' and progress bars' own output, as a terminal would show it (carriage-return redraws, ANSI codes):
# read by the first guess at unit level; the formats above are also each put through a real runtime check
TRAINER_FORMATS: dict[str, str] = {
    "hf trainer": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        if kind == "start":
            self.total, self.epoch = values["updates"], 0.0
            return
        if kind == "train":
            self.epoch = values["update"] / self.total
            logs = {"loss": round(values["loss"], 4), "grad_norm": values["gradNorm"], "learning_rate": values["lr"],
                    "reward": values["reward_mean"], "reward_std": values["reward_std"], "kl": values["kl"],
                    "epoch": round(self.epoch, 2)}
        elif kind == "eval":
            logs = {"eval_reward": values["eval_reward_mean"], "eval_runtime": 0.51, "eval_samples_per_second": 7.8,
                    "eval_steps_per_second": 1.96, "epoch": round(self.epoch, 2)}
        else:
            logs = {"train_runtime": 12.3, "train_samples_per_second": 0.65, "train_steps_per_second": 0.24,
                    "train_loss": 0.25, "epoch": 1.0}
        done = values.get("update", self.total)
        bar = (f"{100 * done // self.total:3d}%|{'#' * (10 * done // self.total):<10}| {done}/{self.total} "
               f"[00:0{done}<00:00,  1.00s/it]")
        with self.train_path.open("a") as fh:  # what tqdm.write leaves: the bar, cleared, the dict, the bar again
            fh.write(f"\\r{bar}\\r{' ' * len(bar)}\\r{logs}\\n\\r{bar}")
''',
    "tqdm redraws": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        if kind == "start":
            self.total = values["updates"]
        if kind not in ("train", "eval"):
            return
        done = values["update"]
        if kind == "train":  # the bar redrawn as the update's episodes come in, the update's own values last
            final = {"loss": values["loss"], "gradNorm": values["gradNorm"], "reward_mean": values["reward_mean"]}
            draws = [{k: v * part / 3 for k, v in final.items()} for part in (1, 2)] + [final]
            text = "".join(f"\\r\\x1b[2K\\x1b[32mtrain\\x1b[0m {100 * done // self.total:3d}%|"
                           f"{'#' * (10 * done // self.total):<10}| {done}/{self.total} [00:0{done}<00:00, 1.50s/it, "
                           + ", ".join(f"{k}={v:.4g}" for k, v in draw.items()) + "]" for draw in draws)
        else:
            text = (f"\\x1b[1m\\x1b[33meval\\x1b[0m {done}/{self.total} "
                    f"eval_reward_mean=\\x1b[36m{values['eval_reward_mean']:.4g}\\x1b[0m\\x1b[K")
        with self.train_path.open("a") as fh:
            fh.write(text + "\\n")
''',
    "lightning bar": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        if kind == "start":
            self.total = values["updates"]
        if kind not in ("train", "eval"):
            return
        if kind == "train":
            self.done = values["update"]
            self.shown = {"v_num": 0, "loss": values["loss"], "gradNorm": values["gradNorm"],
                          "reward_mean": values["reward_mean"]}
        else:  # the validation bar below, then the epoch's bar redrawn at the same position with the result
            self.shown["val_reward_mean"] = values["eval_reward_mean"]
        bar = (f"\\rEpoch 0: {100 * self.done // self.total:3d}%|{'#' * (10 * self.done // self.total):<10}| "
               f"{self.done}/{self.total} [00:0{self.done}<00:00,  1.20it/s, "
               + ", ".join(f"{k}={v:.3g}" for k, v in self.shown.items()) + "]")
        validation = "\\rValidation DataLoader 0: 100%|##########| 2/2 [00:00<00:00, 20.00it/s]\\x1b[A\\n"
        with self.train_path.open("a") as fh:
            fh.write((validation if kind == "eval" else "") + bar + "\\n")
''',
    "accelerate logger": '''
    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        import logging
        if getattr(self, "logger", None) is None:
            self.logger = logging.Logger("__main__")
            handler = logging.FileHandler(self.train_path)
            handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                                                   datefmt="%m/%d/%Y %H:%M:%S"))
            self.logger.addHandler(handler)
        if kind == "start":
            self.total = values["updates"]
            self.logger.info("***** Running training *****")
            self.logger.info("  Total optimization steps = %d", self.total)
        elif kind == "train":
            self.logger.info("Update %d/%d | loss: %.4f | grad_norm: %.4f | reward: %.4f | kl: %.4f", values["update"],
                             self.total, values["loss"], values["gradNorm"], values["reward_mean"], values["kl"])
        elif kind == "eval":
            self.logger.info("Evaluation at update %d | reward: %.4f", values["update"], values["eval_reward_mean"])
        else:
            self.logger.info("Training completed. Do not forget to share your model on huggingface.co/models =)")
            self.logger.handlers[0].close()
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
_METHODS = {**FORMATS, **TRAINER_FORMATS, **LEARNED_FORMATS}

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

