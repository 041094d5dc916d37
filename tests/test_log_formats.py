"""train.logs read as researchers write it: the first guess on a corpus of formats (the first eight also through a
real runtime check with the tiny agent, then `status`'s metrics and the curves) and on real console output, each
line as a terminal shows it; the misreads that once happened; a log the guess cannot read, said clearly; a format
learned from a real sample, TensorBoard event files; and the honest evidence around them: the processes that
really ran, weights kept out of the workspace's git, progress without a total."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import git
import pytest

from conftest import GENERATION_STEPS, copy_generated_set, edit_file, file_answer, roles_reply, write_transcript
from log_corpus import FORMATS, LEARNED_ONLY, TRAINER_FORMATS, format_variant, with_format, write_log
from orchestrator.base.actionlog import ActionLog
from orchestrator.checks import RuntimeCheckSpec, ShortRun, run_runtime_check
from orchestrator.base.execution import ExecutionResult
from orchestrator.llm import LLMError
from orchestrator.training.logformat import (LOG_FORMAT_FILE, LogFormat, format_from_answer, logging_code_hash,
                                             parse_log, read_log, sample_problems)
from orchestrator.training.monitor import Progress, progress
from orchestrator.nodes.logformat import validated
from orchestrator.nodes.train import describe
from orchestrator.training.plots import latest_metrics, write_curves
from orchestrator.run.runs import latest_formal_metrics, metrics_line, state_record
from test_tiny_agent import cleanup_roles


# ---------------------------------------------------------------- the first guess on the corpus


@pytest.mark.parametrize("name", [*FORMATS, *TRAINER_FORMATS])
def test_the_first_guess_reads_every_format_of_the_corpus(tmp_path: Path, name: str):
    path = write_log(name, tmp_path)
    records = read_log(path)
    trains = [r for r in records if r.kind == "train"]
    assert [r.values["update"] for r in trains] == [1, 2, 3]
    assert [r.values["loss"] for r in trains] == pytest.approx([0.125, 0.25, 0.375])
    assert [r.values["grad_norm"] for r in trains] == pytest.approx([1.5, 2.5, 3.5])
    assert [r.values["reward_mean"] for r in trains] == pytest.approx([0.0, 0.25, 0.5])
    evals = [r for r in records if r.kind == "eval"]
    assert [r.values["eval_reward_mean"] for r in evals] == pytest.approx([0.7, 0.8])
    assert [r.values["update"] for r in evals] == [2, 3]
    assert sample_problems(records) == []
    latest = latest_metrics(path)
    assert latest["update"] == 3 and latest["reward"] == pytest.approx(0.5) and latest["loss"] == pytest.approx(0.375)
    assert re.match(r"formal_train: update 3(/3)?( episode 6)? reward 0.5 loss 0.375", describe(progress(records)))


def test_hf_style_printed_dicts_keep_their_keys_and_non_finite_values():
    records = parse_log("{'update': 1, 'loss': nan, 'grad_norm': inf, 'info': 'inference ok', 'epoch': 0.5}\n"
                        "{'eval_loss': 0.3, 'eval_reward': -inf, 'epoch': 0.5}\n")
    assert [r.kind for r in records] == ["train", "eval"]
    assert records[0].values["info"] == "inference ok"
    assert math.isnan(records[0].values["loss"]) and records[0].values["grad_norm"] == math.inf
    assert records[1].values["eval_reward_mean"] == -math.inf


@pytest.mark.parametrize("line", [
    "2026-11-25 10:00:00,123 - grpo - INFO - step: 3 | loss: 0.5 | grad_norm: 1.5",
    "2026-11-25 10:00:00.123 | INFO     | grpo.train:main:42 - step=3 loss=0.5 grad_norm=1.5",
    "[2026-11-25 10:00:00,123][grpo][INFO] step=3, loss=0.5, grad_norm=1.5",
    "I1125 10:00:00.123456 4242 train.py:99] step 3 loss 0.5 grad_norm 1.5",
    "Training:  30%|███       | 3/10 [00:03<00:07,  1.00it/s, loss=0.5, grad_norm=1.5]",
    "11/25/2026 10:00:00 - INFO - __main__ - step=3 loss=0.5 grad_norm=1.5",
    "[rank0]: 2026-11-25 10:00:00,123 - grpo - INFO - step=3, loss=0.5, grad_norm=1.5",
    "[11/25/26 10:00:00] INFO     step: 3 loss: 0.5 grad_norm: 1.5                        train.py:42",
    "\x1b[32mINFO\x1b[0m:grpo:\x1b[1mstep\x1b[0m=3 loss=\x1b[36m0.5\x1b[0m grad_norm=1.5",
    "Training:  30%|███       | 3/10 [00:03<00:07,  1.00it/s, {'loss': 0.5, 'grad_norm': 1.5}]",
    "Update 3/10 | Episodes: 100%|##########| 8/8 [00:05<00:00,  1.60it/s, loss=0.5, grad_norm=1.5]",
    "[INFO|trainer.py:2345] 2026-11-25 10:00:00,123 >> step=3 loss=0.5 grad_norm=1.5",
    "Step 3: loss=0.5, grad_norm=1.5",
])
def test_logging_prefixes_and_progress_bars_leave_every_key(line: str):
    record = parse_log(line + "\n")[-1]
    assert record.kind == "train"
    assert (record.values["update"], record.values["loss"], record.values["grad_norm"]) == (3.0, 0.5, 1.5)
    assert record.values.keys() <= {"update", "updates", "loss", "grad_norm"}
    assert record.time is None or record.time.replace(microsecond=0) == datetime(2026, 11, 25, 10, 0)
    assert "\x1b" not in record.raw


# ---------------------------------------------------------------- read as a terminal shows it


def test_a_line_redrawn_with_carriage_returns_is_its_last_redraw_without_escape_codes(tmp_path: Path):
    bar = "\r\x1b[2K\x1b[32mtrain\x1b[0m {0}/2 [00:01<00:01, loss={1}, reward={2}]"
    path = tmp_path / "train.logs"
    path.write_bytes(("".join(bar.format(1, loss, 0.1) for loss in (0.9, 0.7, 0.5)) + "\r" + " " * 30 + "\n"
                      + bar.format(2, 0.4, 0.2) + "\x1b[A\n").encode())
    records = read_log(path)
    assert [(r.values["update"], r.values["loss"], r.values["reward_mean"]) for r in records] == [(1, 0.5, 0.1),
                                                                                               (2, 0.4, 0.2)]
    assert records[0].raw == "train 1/2 [00:01<00:01, loss=0.5, reward=0.1]"
    assert sample_problems(records) == [] and progress(records).total_updates == 2


# real console output, `python script.py > train.logs 2>&1`: a 2-epoch HF Trainer (transformers 5.24.0, logging_steps=1,
# evaluation every 3 steps); tqdm 4.70.1 bars, one per update, colour="green", a postfix redrawn per episode, evaluation
# lines between; a rich Progress (force_terminal) with one task per update, its live display redrawn in place
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("fixture", "updates", "losses", "evals"), [
    ("console_hf_trainer.txt", list(range(1, 9)), (0.8741, 2.035), [3, 6, 8]),
    ("console_tqdm_colour.txt", [1, 2, 3], (0.125, 0.375), [2, 3]),
    ("console_rich_live.txt", [1, 2, 3], (0.125, 0.375), []),
])
def test_real_console_output_is_read_as_its_terminal_showed_it(fixture: str, updates: list, losses: tuple, evals: list):
    records = read_log(FIXTURES / fixture)
    trains = [r for r in records if r.kind == "train"]
    assert [r.values["update"] for r in trains] == updates
    assert (trains[0].values["loss"], trains[-1].values["loss"]) == losses
    assert [r.values["update"] for r in records if r.kind == "eval"] == evals
    assert sample_problems(records) == [] and not any("\x1b" in r.raw for r in records)


HF_TRAINER = ("{'loss': 0.6931, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.25}\n"
              "{'loss': '0.6012', 'grad_norm': '1.1', 'learning_rate': '4e-05', 'epoch': '0.5'}\n"
              "{'eval_loss': 0.55, 'eval_runtime': 0.31, 'eval_samples_per_second': 12.9, "
              "'eval_steps_per_second': 3.2, 'epoch': 0.5}\n"
              "{'train_runtime': 4.1, 'train_samples_per_second': 3.9, 'train_steps_per_second': 0.98, "
              "'train_loss': 0.64, 'epoch': 0.5}\n")


def test_hf_trainer_dicts_are_numbered_and_its_closing_summary_is_no_update():
    records = parse_log(HF_TRAINER)
    assert [(r.kind, r.values.get("update")) for r in records] == [("train", 1), ("train", 2), ("eval", 2),
                                                                    ("done", None)]
    assert [r.values["loss"] for r in records if r.kind == "train"] == [0.6931, 0.6012]
    assert describe(progress(records)) == "formal_train: update 2 loss 0.6012, ETA 0 s"
    assert sample_problems(records) == []


@pytest.mark.parametrize(("line", "kind"), [
    ("Training finished in 12.3s: final loss=0.4 reward=0.2", "done"),
    ("Training complete. loss: 0.4, reward: 0.2", "done"),
    ("Evaluating:  50%|█████     | 1/2 [00:01<00:01, 1.00it/s, reward=0.9, loss=0.3]", "eval"),
    ("Evaluating:  50%|█████     | 1/2 [00:01<00:01, 1.00it/s, {'reward': 0.9, 'loss': 0.3}]", "eval"),
    ("step=3 loss=0.5 reward=0.1 samples_per_second=10.5", "train"),  # one throughput: an update's, not a summary
    ("{'update': 3, 'loss': 0.5, 'runtime': 12.5}", "train"),
    ('{"update": 3, "final_loss": 0.3, "best_reward": 0.9}', "done"),
    ("Update 3 summary: loss=0.4 reward=0.2", "train"),
])
def test_what_a_line_says_it_is_wins_over_the_update_it_looks_like(line: str, kind: str):
    assert [r.kind for r in parse_log("update=2 loss=0.5 reward=0.1\n" + line + "\n")] == ["train", kind]


@pytest.mark.parametrize("line", ["step 3/100 | loss 0.5 | reward 0.1", "Step: 3/100, loss: 0.5, reward: 0.1",
                                  "Update 3/100 | Episodes: 100%|##########| 8/8 [00:05<00:00, loss=0.5, reward=0.1]"])
def test_an_update_s_position_gives_the_total_too(line: str):
    assert describe(progress(parse_log(line + "\n"))) == "formal_train: update 3/100 reward 0.1 loss 0.5"


def test_a_line_that_measured_nothing_is_no_update():
    text = ("***** Running training *****, updates = 3\nTraining: num_updates = 3\n"
            "***** train metrics *****\n  epoch                    =        1.0\n"  # HF's trainer.log_metrics
            "  train_loss               =     0.4567\n  train_runtime            = 0:00:12.34\n")
    assert parse_log(text) == []


@pytest.mark.parametrize(("second", "read_as"), [
    ("update=2 loss=0.4 reward=0.2", [2]),  # the same update drawn again: one update
    ("update=2 reward=0.2 loss=0.4 kl=0.01", [2]),  # drawn again with one more value: still one
    ("update=1 loss=0.5 reward=0.1", [2]),  # an earlier row of a live display drawn again
    ("update=2 loss=0.9 reward=0.7", [2, 2]),  # other values under the same number: a misreading, kept
    ("update=nan loss=0.9 reward=0.7", [2, 3]),  # no number of its own: the next update
])
def test_a_redraw_of_the_same_update_is_one_update_and_a_real_duplicate_stays_visible(second: str, read_as: list):
    records = parse_log("update=1 loss=0.5 reward=0.1\nupdate=2 loss=0.4 reward=0.2\n" + second + "\n")
    assert [r.values["update"] for r in records][1:] == read_as
    assert bool(sample_problems(records)) == (read_as == [2, 2])


def test_a_lightning_bar_counts_on_across_epochs_and_reports_each_validation_once():
    bar = "Epoch {}: 100%|##########| 10/10 [00:01<00:00,  9.50it/s, v_num=0, {}]"
    validation = "Validation DataLoader 0: 100%|##########| 5/5 [00:00<00:00, 50.00it/s]\x1b[A"
    text = "\n".join([bar.format(0, "train_loss_step=0.5"), validation,
                      bar.format(0, "train_loss_step=0.5, val_loss=0.4"),
                      bar.format(1, "train_loss_step=0.4, val_loss=0.4"), validation,
                      bar.format(1, "train_loss_step=0.4, val_loss=0.35"),
                      "`Trainer.fit` stopped: `max_epochs=2` reached."]) + "\n"
    records = parse_log(text)
    assert [(r.kind, r.values["update"]) for r in records] == [("train", 10), ("eval", 10), ("train", 20),
                                                                ("eval", 20)]
    assert [r.values["loss"] for r in records if r.kind == "train"] == [0.5, 0.4]
    assert [r.values["eval_loss"] for r in records if r.kind == "eval"] == [0.4, 0.35]
    assert "val_loss" not in records[2].values and sample_problems(records) == []


def test_keras_style_steps_count_on_from_the_epoch_line_above_them():
    text = ("Epoch 1/2\n10/10 [==============================] - 1s 10ms/step - loss: 0.5000 - reward: 0.1000\n"
            "Epoch 2/2\n10/10 [==============================] - 1s 10ms/step - loss: 0.4000 - reward: 0.2000\n")
    records = parse_log(text)
    assert [(r.values["update"], r.values["updates"], r.values["loss"]) for r in records] == [(10, 20, 0.5),
                                                                                          (20, 20, 0.4)]


@pytest.mark.parametrize("text", [
    "| step | loss | grad_norm |\n|---|---|---|\n| 3 | 0.5 | 1.5 |\n",
    "step;loss;gradNorm\n3;0.5;1.5\n",
    "step   loss    grad_norm\n3      0.5     1.5\n",
    "step=3 loss=tensor(0.5000, grad_fn=<MeanBackward0>) grad_norm=tensor(1.5)\n",
])
def test_tables_and_tensors_printed_as_they_are(text: str):
    record = [r for r in parse_log(text) if r.kind == "train"][-1]
    assert (record.values["update"], record.values["loss"], record.values["grad_norm"]) == (3.0, 0.5, 1.5)


def test_prose_and_warnings_are_not_updates():
    text = ("Loaded 3 files in 2 seconds\nloss went up\nSaving checkpoint 100 to /tmp/out\n"
            "ValueError: update=3 is bad\nepoch,notes\n")
    assert [r for r in parse_log(text) if r.kind == "train"] == []


# ---------------------------------------------------------------- the misreads that once happened


@pytest.mark.parametrize("text", [
    "train update=1 loss=0.5 grad_norm=1 reward=0.2\ntrain update=2 loss=0.4 grad_norm=1 reward=0.3\n"
    "eval update=2 reward=0.9 invalid_action_rate=0\n",
    "update: 1, loss: 0.5, grad_norm: 1, reward: 0.2\nupdate: 2, loss: 0.4, grad_norm: 1, reward: 0.3\n"
    "evaluation update: 2, reward: 0.9\n",
    '{"split": "train", "step": 1, "loss": 0.5, "grad_norm": 1, "reward": 0.2}\n'
    '{"split": "train", "step": 2, "loss": 0.4, "grad_norm": 1, "reward": 0.3}\n'
    '{"split": "eval", "step": 2, "reward": 0.9}\n',
], ids=["key=value", "key: value", "json split"])
def test_an_evaluation_line_with_an_update_number_is_not_an_update(text: str):
    records = parse_log(text)
    assert [r.kind for r in records] == ["train", "train", "eval"]
    now = progress(records)
    assert (now.update, now.reward_mean, now.loss) == (2, 0.3, 0.4)


def test_the_first_key_after_a_logging_modules_prefix_is_kept():
    record = parse_log("INFO:grpo:update=1 loss=0.5 grad_norm=1.0\n")[0]
    assert record.values["update"] == 1.0 and record.kind == "train"


def test_a_tensorboard_only_run_is_read_from_its_event_files(tmp_path: Path):
    path = write_log("tensorboard only", tmp_path)
    assert not path.exists()
    records = read_log(path)
    assert [r.values["update"] for r in records if r.kind == "train"] == [1, 2, 3]
    assert write_curves(path, tmp_path / "plots", "formal-1").files


def test_progress_without_a_total_says_no_total():
    now = Progress(update=1, total_updates=None, episode=None, reward_mean=0.5, loss=0.25, eta_seconds=None)
    assert describe(now) == "formal_train: update 1 reward 0.5 loss 0.25"
    assert describe(now, planned_updates=4) == "formal_train: update 1/4 reward 0.5 loss 0.25"


# ---------------------------------------------------------------- a log the first guess cannot read, said clearly


UNREADABLE = {  # what the runtime check's short run left in train.logs, and what the guess finds in it
    "no update": ("00001 | +0.125000 | 1.500000 | +0.0000\nE0001 | +0.7000\n00002 | +0.250000 | 2.500000 | +0.2500\n",
                  "shows no completed update"),
    "an update twice": ("update=1 loss=0.5 grad_norm=1.5 reward=0.1\nupdate=1 loss=0.9 grad_norm=0.2 reward=0.7\n",
                        "lines 1 and 2 were both read as update 1"),
}


def _runtime_check_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str, replies: list[dict]):
    """The runtime_check node on a short run that exited 0 and left `log` as train.logs, with a replay LLM
    holding `replies`: (the node's state update, train.logs's path, the project's claude.logs)."""
    from orchestrator.llm import ReplayLLM
    from orchestrator.nodes import checks as check_nodes
    from orchestrator.run.state import RunContext
    from orchestrator.base.workspace import Workspace

    log_path = tmp_path / "run/runtime_check/logs/train.logs"
    log_path.parent.mkdir(parents=True)
    log_path.write_text(log)
    ran = ShortRun(ExecutionResult(0, "", "", False, 1.0), tmp_path, log_path, [], None, 1)
    monkeypatch.setattr(check_nodes, "short_run", lambda *args: ran)
    transcript = tmp_path / "transcript.json"
    transcript.write_text(json.dumps({"replies": [{"tag": "fix", "text": "unused"}, *replies]}))
    ctx = RunContext(run_id="r1", project_root=tmp_path, source_of_truth=tmp_path, run_dir=tmp_path / "run",
                     workspace=Workspace.open(tmp_path / "workspace"), llm=ReplayLLM(transcript=transcript),
                     log=ActionLog(tmp_path / "claude.logs", tmp_path / "run"),
                     runtime_check=RuntimeCheckSpec(model="/a/real/model", real_model=False))
    update = check_nodes.runtime_check({"roles": cleanup_roles().to_dict()}, SimpleNamespace(context=ctx))
    return update, log_path, (tmp_path / "claude.logs").read_text()


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_with_no_format_answer_the_run_stops_on_what_the_guess_found_in_train_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str):
    log, found = UNREADABLE[case]
    with pytest.raises(LLMError) as stopped:  # the runner ends the run `failed` on it; a resume runs the check again
        _runtime_check_on(tmp_path, monkeypatch, log, replies=[])
    reason = f"LLM error: {stopped.value}"  # the runner's exit reason
    log_path = tmp_path / "run/runtime_check/logs/train.logs"
    claude_logs = (tmp_path / "claude.logs").read_text()
    first_line = json.dumps(log.splitlines()[0])
    last_error = state_record(tmp_path / "run", "failed", reason, {"evidence": {"summary": reason}}, [])["last_error"]
    for said in (last_error, reason):  # what `status` and report.md show
        assert found in said and str(log_path) in said and first_line in said
    assert "no log-format answer: replay transcript has no reply #1 for 'log_format'" in reason
    guess = claude_logs.index("action=first_guess")  # said before the answer is asked for, then the LLM's error
    assert found in claude_logs[guess:] and str(log_path) in claude_logs[guess:] and first_line in claude_logs[guess:]
    assert claude_logs.index("no answer: replay transcript has no reply #1 for 'log_format'") > guess


def test_an_answer_that_cannot_read_the_log_either_leaves_the_same_account_for_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log, found = UNREADABLE["no update"]
    wrong = {"tag": "log_format", "text": '```json\n{"syntax": "csv"}\n```'}
    update, log_path, _ = _runtime_check_on(tmp_path, monkeypatch, log, replies=[wrong, wrong])
    assert "status" not in update and update["evidence"]["kind"] == "no_updates"
    summary = update["evidence"]["summary"]
    assert found in summary and str(log_path) in summary and '"E0001 | +0.7000"' in summary
    assert update["attempts"][0]["outcome"].startswith("malformed: read with this description")


# ---------------------------------------------------------------- a learned format


def _learned_sample(tmp_path: Path) -> Path:
    return write_log(LEARNED_ONLY, tmp_path)


def test_a_format_the_guess_cannot_read_is_learned_and_checked_on_the_sample(tmp_path: Path):
    path = _learned_sample(tmp_path)
    assert [r for r in read_log(path) if r.kind == "train"] == []
    pattern = r"^E?(?P<update>\d+) \| (?P<loss>\S+)(?: \| (?P<grad_norm>\S+) \| (?P<reward>\S+))?$"
    counts_evals = json.dumps({"syntax": "regex", "pattern": pattern})
    with pytest.raises(ValueError, match="both read as update 2: evaluation lines are being counted"):
        validated(counts_evals, path, "h")
    right = validated(json.dumps({"syntax": "regex", "pattern": pattern, "eval_lines": "^E", "keys": {}}), path, "h")
    assert right.learned and right.code_hash == "h"
    records = read_log(path, right)
    assert [r.values["update"] for r in records if r.kind == "train"] == [1, 2, 3]
    assert latest_metrics(path, right)["reward"] == pytest.approx(0.5)


def test_a_record_that_spans_lines_is_read_with_a_learned_record_start(tmp_path: Path):
    path = tmp_path / "train.logs"
    path.write_text("".join(f"=== update {u} ===\nloss: {u / 8}\ngrad_norm: {u + 0.5}\nreward: {u / 4}\n"
                            + (f"== eval at update {u} ==\nreward: 0.9\n" if u == 2 else "") for u in (1, 2, 3)))
    answer = {"syntax": "key: value", "record_start": "^==", "eval_lines": "eval", "keys": {"update": "update"}}
    log_format = validated(json.dumps(answer), path, "h")
    records = read_log(path, log_format)
    assert [(r.kind, r.values["update"]) for r in records] == [("train", 1), ("train", 2), ("eval", 2), ("train", 3)]
    assert latest_metrics(path, log_format) == {"update": 3, "loss": 0.375, "grad_norm": 3.5, "reward": 0.75}


@pytest.mark.parametrize(("answer", "problem"), [
    ({"syntax": "yaml"}, "syntax must be one of"),
    ({"syntax": "regex", "pattern": "(\\d+"}, "not a valid Python regular expression"),
    ({"syntax": "regex", "pattern": "\\d+"}, "named groups"),
    ({"syntax": "csv", "keys": {"score": "R"}}, "'score' is not one of the keys' names"),
])
def test_a_malformed_description_is_refused_with_the_reason(answer: dict, problem: str):
    with pytest.raises(ValueError, match=problem):
        format_from_answer(answer)


def test_the_logging_code_hash_follows_the_logging_code_only():
    train = (Path(__file__).resolve().parents[1] / "examples/cleanup/reference_generated/train.py").read_text()
    assert logging_code_hash(train) == logging_code_hash(train.replace("def make_env(", "def make_env(  "))
    assert logging_code_hash(train) != logging_code_hash(with_format(train, "csv"))


def test_a_learned_format_is_reused_while_the_logging_code_is_unchanged(tmp_path: Path):
    from types import SimpleNamespace

    from orchestrator.nodes.logformat import known_format
    from orchestrator.base.workspace import Workspace

    workspace = Workspace.open(tmp_path / "workspace")
    train = (Path(__file__).resolve().parents[1] / "examples/cleanup/reference_generated/train.py").read_text()
    workspace.write("generated/train.py", with_format(train, LEARNED_ONLY))
    learned = LogFormat(syntax="regex", pattern=r"(?P<update>\d+)", code_hash=logging_code_hash(
        workspace.read("generated/train.py")))
    workspace.write(LOG_FORMAT_FILE, json.dumps(learned.to_dict()))
    ctx = SimpleNamespace(workspace=workspace)
    assert known_format(ctx) == learned
    workspace.write("generated/train.py", with_format(train, "csv"))  # a fix rewrote the logging code
    assert known_format(ctx) == LogFormat()


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_the_pipeline_learns_an_unreadable_format_once_and_commits_it(project: Path, tmp_path: Path):
    from orchestrator.runner import start_run

    reference = copy_generated_set(tmp_path / "reference")
    format_variant(reference, LEARNED_ONLY)
    (project / "source_of_truth/grpo_template.py").write_text((reference / "grpo_template.py").read_text())
    pattern = r"^E?(?P<update>\d+) \| (?P<loss>\S+)(?: \| (?P<grad_norm>\S+) \| (?P<reward>\S+))?$"
    # the first description reads no loss, a problem whatever values this CPU's run logged (a description that counts
    # the evaluation lines as updates is not: where every value is 0, the eval line reads as a redraw of its update)
    answers = [{"syntax": "regex", "pattern": r"^E?(?P<update>\d+) \|"},
               {"syntax": "regex", "pattern": pattern, "eval_lines": "^E"}]
    replies = [roles_reply()] + [{"tag": step, "text": file_answer(*names, folder=reference)}
                                 for step, names in GENERATION_STEPS.items()]
    replies += [{"tag": "log_format", "text": f"```json\n{json.dumps(a)}\n```", "usage": {"input_tokens": 2000,
                                                                                         "output_tokens": 90}}
                for a in answers]
    spec = RuntimeCheckSpec(model="", real_model=False, episodes=4, turns=1, cpu_processes=1)
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", replies), run_id="r1", runtime_check=spec,
                        until="runtime_check")
    assert outcome.status == "done", outcome.reason
    stored = LogFormat.from_dict(json.loads((project / "workspace" / LOG_FORMAT_FILE).read_text()))
    assert stored.eval_lines == "^E" and outcome.state["log_format"] == stored.to_dict()
    assert outcome.state["ledger"]["log_format"]["calls"] == 2  # the first description was re-asked with the problem
    subjects = git.Repo(project / "workspace").git.log("run/r1", "--format=%s").splitlines()
    assert "log_format attempt 1: learned: regex" in subjects
    log = project / "runs/r1/runtime_check/logs/train.logs"
    assert [r.values["update"] for r in read_log(log, stored) if r.kind == "train"] == [1, 2]


# ---------------------------------------------------------------- the corpus through real runtime checks


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
@pytest.mark.parametrize("name", list(FORMATS))
def test_each_format_passes_a_real_runtime_check_with_status_and_curves(tmp_path: Path, name: str):
    folder = copy_generated_set(tmp_path / "generated")
    format_variant(folder, name)
    from orchestrator.tiny.agent import local_tiny_agent

    agent = local_tiny_agent(Path(__file__).resolve().parents[1], folder)
    spec = RuntimeCheckSpec(model=str(agent), real_model=False, plays=True, episodes=4, turns=1, cpu_processes=1)
    result = run_runtime_check(folder, spec, cleanup_roles(), tmp_path / "check")
    assert result.passed, result.summary + "\n" + result.evidence
    assert result.summary.startswith("2 updates")
    logs = tmp_path / "check/logs"
    metrics = latest_formal_metrics(tmp_path, str(logs))
    assert metrics is not None and metrics["update"] == 2 and {"loss", "grad_norm", "reward"} <= set(metrics)
    assert re.match(r"formal run logs, update 2: reward -?\d", metrics_line(metrics))
    curves = write_curves(logs / "train.logs", tmp_path / "plots", name)
    assert {"loss", "reward", "grad_norm"} <= {p.stem for p in curves.files}


# ---------------------------------------------------------------- the processes that really ran


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_a_launch_script_that_ignores_the_process_count_is_evidence_for_a_fix(tmp_path: Path):
    folder = copy_generated_set(tmp_path / "generated")
    edit_file(folder, "launch_training.sh", lambda text: text.replace('"${CPU_PROCESSES:-1}"', "1"))
    from orchestrator.tiny.agent import local_tiny_agent

    agent = local_tiny_agent(Path(__file__).resolve().parents[1], folder)
    spec = RuntimeCheckSpec(model=str(agent), real_model=False, plays=True, episodes=4, turns=1, cpu_processes=2)
    result = run_runtime_check(folder, spec, cleanup_roles(), tmp_path / "check")
    assert not result.passed and result.kind == "process_count" and result.files == ["launch_training.sh"]
    assert "started 1 training process(es) where 2 (CPU_PROCESSES=2, no GPU) were asked" in result.summary
