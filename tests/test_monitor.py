"""The train.logs monitor: parsing, each detector on a log that triggers it and on a healthy one,
the incremental tail, progress/ETA and trend summaries. Logs are synthetic, in RunLogs' format."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator.training.logformat import LogRecord, LogTail, parse_line, parse_log
from orchestrator.training.monitor import (
    EVIDENCE_LIMIT,
    MonitorConfig,
    Progress,
    detect_all,
    detect_flat_reward,
    detect_grad_norm_explosion,
    detect_hang,
    detect_invalid_rise,
    detect_kl_blowup,
    detect_nan,
    detect_reward_collapse,
    detect_stderr,
    progress,
    summarize_trends,
)

T0 = datetime(2026, 11, 23, 9, 40, 1)
STEP = timedelta(seconds=15)
CONFIG = MonitorConfig()

Overrides = Callable[[int], dict[str, Any]]


def fmt(value: Any) -> str:
    """RunLogs' _fmt."""
    return f"{value:.6g}" if isinstance(value, float) else str(value).replace(" ", "_")


def line(time: datetime, kind: str, **values: Any) -> str:
    return f"{time:%Y-%m-%dT%H:%M:%S} {kind} " + " ".join(f"{k}={fmt(v)}" for k, v in values.items())


def healthy_metrics(update: int) -> dict[str, Any]:
    wobble = ((update * 7) % 5 - 2) / 10  # deterministic noise in [-0.2, 0.2]
    return dict(lr=1e-6, clip_ratio=0.01, completion_clipped_ratio=0.1 + wobble / 4, completion_mean_length=120.0,
                frac_reward_zero_std=0.25, grad_norm=0.5 + wobble, invalid_action_rate=0.3 - update / 200,
                kl=0.002 * update, loss=0.01 + wobble / 10, num_tokens=3840.0, policy_loss=0.01,
                reward_mean=0.2 + update / 50 + wobble, reward_std=0.4, step_time=15.0 + wobble)


def make_log(updates: int, overrides: Overrides = lambda u: {}, *, total: int | None = None,
             done: bool = False, eval_every: int = 10, start: datetime = T0) -> str:
    """A run of `updates` train lines, one every 15 s, with metrics from healthy_metrics + overrides."""
    total = updates if total is None else total
    lines = [line(start, "start", model="/tmp/tiny model", processes=1, updates=total, episodes=2 * total,
                  group_size=2, agents=2)]
    for u in range(1, updates + 1):
        metrics = {**healthy_metrics(u), **overrides(u)}
        lines.append(line(start + u * STEP, "train", update=u, episode=2 * u, **metrics))
        if u % eval_every == 0:
            lines.append(line(start + u * STEP + timedelta(seconds=1), "eval", update=u, episode=2 * u,
                              eval_invalid_action_rate=0.1, eval_reward_mean=0.5 + u / 100, eval_reward_std=0.2))
    if done:
        lines.append(line(start + (updates + 1) * STEP, "done", updates=total, episodes=2 * total))
    return "\n".join(lines) + "\n"


def records_for(updates: int, overrides: Overrides = lambda u: {}, **kwargs: Any) -> list[LogRecord]:
    return parse_log(make_log(updates, overrides, **kwargs))


def at(update: int, **values: Any) -> Overrides:
    return lambda u: values if u == update else {}


def from_update(update: int, **values: Any) -> Overrides:
    return lambda u: values if u >= update else {}


HEALTHY = records_for(30, eval_every=5, done=True)


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "kind", "key", "value"), [
    ("2026-11-23T09:40:01 start model=/tmp/tinymodel processes=1 updates=2 episodes=4 group_size=2 agents=2",
     "start", "model", "/tmp/tinymodel"),
    ("2026-11-23T09:40:15 train update=1 episode=2 lr=3e-07 clip_ratio=0 completion_clipped_ratio=1 "
     "completion_mean_length=16 frac_reward_zero_std=1 grad_norm=0 invalid_action_rate=1 kl=0 loss=0 "
     "num_tokens=384 policy_loss=0 reward_mean=-0.3 reward_std=0 step_time=14.5557", "train", "lr", 3e-07),
    ("2026-11-23T09:40:16 eval update=1 episode=2 eval_invalid_action_rate=1 eval_reward_mean=-0.3 "
     "eval_reward_std=0", "eval", "eval_reward_mean", -0.3),
    ("2026-11-23T09:41:00 done updates=2 episodes=4", "done", "updates", 2.0),
])
def test_parse_line_each_kind(text: str, kind: str, key: str, value: float | str) -> None:
    record = parse_line(text + "\n", 7)
    assert record is not None
    assert (record.kind, record.values[key], record.line_no, record.raw) == (kind, value, 7, text)
    assert record.time is not None and record.time.isoformat() == text[:19]


def test_parse_line_train_has_every_key_as_float() -> None:
    record = parse_line(line(T0, "train", update=3, episode=6, **healthy_metrics(3)))
    assert record is not None
    assert record.values["update"] == 3.0
    assert set(record.values) == {"update", "episode", *healthy_metrics(3)}
    assert all(isinstance(v, float) for v in record.values.values())


def test_parse_line_stdout_form_has_no_time() -> None:
    record = parse_line("train update=2 episode=4 loss=0.5")
    assert record is not None
    assert (record.kind, record.time, record.values["loss"]) == ("train", None, 0.5)


@pytest.mark.parametrize("text", [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 587, in <module>',
    "ValueError: update=3 is bad",
    "/usr/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have grad",
    "",
    "   ",
    "train",
    "training started on 2 GPUs",
    "2026-11-23T09:40:01 train",
    "2026-11-23T09:40:01 restart update=1",
    "2026-13-23T09:40:01 train update=1",
])
def test_parse_line_rejects_non_records(text: str) -> None:
    assert parse_line(text) is None


@pytest.mark.parametrize(("text", "check"), [
    ("nan", math.isnan),
    ("inf", lambda v: v == math.inf),
    ("-inf", lambda v: v == -math.inf),
])
def test_parse_line_non_finite_values(text: str, check: Callable[[float], bool]) -> None:
    record = parse_line(f"2026-11-23T09:40:15 train update=4 loss={text} grad_norm={text}")
    assert record is not None
    assert check(record.values["loss"]) and check(record.values["grad_norm"])


@pytest.mark.parametrize("text", ["tiny_model", "1_000", "Infinity", "1.2.3", ""])
def test_parse_line_keeps_non_numbers_as_strings(text: str) -> None:
    record = parse_line(f"2026-11-23T09:40:01 start model={text} updates=2")
    assert record is not None
    assert record.values["model"] == text


def test_parse_log_skips_noise_and_numbers_lines_from_one() -> None:
    text = make_log(2).replace("\n", "\nsome warning\n", 1)
    records = parse_log(text)
    assert [r.kind for r in records] == ["start", "train", "train"]
    assert [r.line_no for r in records] == [1, 3, 4]
    assert records[0].values["model"] == "/tmp/tiny_model"


# ---------------------------------------------------------------- record detectors


TRIGGERS = [
    pytest.param(detect_nan, at(7, loss=math.nan), "nan_loss", 7, id="nan-loss"),
    pytest.param(detect_nan, at(5, policy_loss=math.inf), "nan_loss", 5, id="inf-policy-loss"),
    pytest.param(detect_nan, at(9, kl=-math.inf), "nan_loss", 9, id="neg-inf-kl"),
    pytest.param(detect_nan, from_update(4, grad_norm=math.nan), "nan_grad_norm", 4, id="nan-grad-norm"),
    pytest.param(detect_grad_norm_explosion, at(12, grad_norm=50.0), "grad_norm_explosion", 12, id="grad-relative"),
    pytest.param(detect_grad_norm_explosion, at(2, grad_norm=2e4), "grad_norm_explosion", 2, id="grad-absolute"),
    pytest.param(detect_kl_blowup, at(9, kl=3.2), "kl_blowup", 9, id="kl"),
    pytest.param(detect_reward_collapse, from_update(15, reward_mean=-1.0), "reward_collapse", 16, id="collapse"),
    # early level 0.29 (updates 1-3); the mean of updates 11-13 is 0.68
    pytest.param(detect_invalid_rise, from_update(12, invalid_action_rate=0.9), "invalid_action_rise", 13,
                 id="invalid-rise"),
]


@pytest.mark.parametrize(("detector", "overrides", "kind", "update"), TRIGGERS)
def test_detector_fires_on_first_bad_update(detector: Callable[..., Any], overrides: Overrides, kind: str,
                                            update: int) -> None:
    anomaly = detector(records_for(25, overrides), CONFIG)
    assert anomaly is not None
    assert (anomaly.kind, anomaly.update, anomaly.serious) == (kind, update, True)
    assert f"update={update} " in anomaly.evidence
    assert "\n" not in anomaly.message and f"update {update}" in anomaly.message


@pytest.mark.parametrize("detector", [detect_nan, detect_grad_norm_explosion, detect_kl_blowup,
                                      detect_reward_collapse, detect_flat_reward, detect_invalid_rise])
def test_detector_quiet_on_healthy_log(detector: Callable[..., Any]) -> None:
    assert detector(HEALTHY, CONFIG) is None


def test_grad_norm_small_after_zero_norms_is_not_an_explosion() -> None:
    # a tiny model with no signal logs grad_norm=0, then any learning looks infinitely larger
    records = records_for(12, lambda u: {"grad_norm": 0.0 if u < 10 else 0.3})
    assert detect_grad_norm_explosion(records, CONFIG) is None


def test_grad_norm_explosion_evidence_shows_the_window() -> None:
    anomaly = detect_grad_norm_explosion(records_for(12, at(12, grad_norm=50.0)), CONFIG)
    assert anomaly is not None
    assert [f"update={u} " in anomaly.evidence for u in range(6, 13)] == [False] + [True] * 6


def test_reward_collapse_waits_for_min_updates() -> None:
    drop = from_update(6, reward_mean=-1.0)
    assert detect_reward_collapse(records_for(9, drop), CONFIG) is None
    anomaly = detect_reward_collapse(records_for(10, drop), CONFIG)
    assert anomaly is not None and anomaly.update == 10


def test_reward_collapse_ignores_a_single_bad_update() -> None:
    assert detect_reward_collapse(records_for(25, at(15, reward_mean=-1.0)), CONFIG) is None


# Sample_EP.logs as the two example templates write a failed action: Cleanup's transcript, Stag Hunt's
CLEANUP_SAMPLES = """===== episode 41 (update 6, seed 47) returns [-0.3, 1.0] =====
--- turn 0 ---
[agent 0] thinking: I am agent 0 at (2, 3). Plan: collect_nearest_apple().
[agent 0] action output: {"action": "collect_nearest_apple", "agent_id": 0, "args": {"coord_x": 4}}
[agent 0] parsed call: {"action": "collect_nearest_apple", "agent_id": 0, "args": {"coord_x": 4}}
[agent 0] helper result: completed=False, played STAY (invalid: TypeError: got an unexpected keyword 'coord_x')
[agent 0] reward: +0.000
[agent 1] action output: {"action": "collect_n
[agent 1] parsed call: null
[agent 1] helper result: completed=False, played STAY (unparseable: no JSON object with an "action" key in the output)
"""
STAGHUNT_SAMPLES = """--- turn 3 ---
[hunter 1] thinking_output: I am agent 1 at (4, 4). Plan: hunt().
[hunter 1] action_output: {"action": "hunt", "agent_id": 1, "args": {}
[hunter 1] parsed_call: null
[hunter 1] helper_result: None valid=False error=ValueError: no JSON object with an "action" key in the output
[hunter 1] declared_move: WAIT  reward: -0.10
"""
# the training rates of a run that lost its action format (benchmarks/README.md: the Cleanup tiny agent's seed-1
# build, one optimiser step per update at lr 2e-3), updates 1-7
CLIMB = dict(enumerate((0.0625, 0.2625, 0.6, 0.5375, 0.65, 0.8, 0.6125), start=1))


def invalid_rates(rates: dict[int, float]) -> Overrides:
    return lambda u: {"invalid_action_rate": rates.get(u, 0.3 - u / 200)}


def test_an_invalid_rate_that_climbs_is_serious_with_the_updates_it_rose_at_and_the_failed_outputs() -> None:
    anomaly = detect_invalid_rise(records_for(7, invalid_rates(CLIMB)), CONFIG, lambda: CLEANUP_SAMPLES)
    assert anomaly is not None and (anomaly.kind, anomaly.update, anomaly.serious) == ("invalid_action_rise", 6, True)
    assert "from 0.3083 (updates 1-3) to 0.6625" in anomaly.message
    assert "it rose at update 4: 0.5375, update 5: 0.65, update 6: 0.8" in anomaly.message
    assert "update 7" not in anomaly.message and "2 failed actions" in anomaly.message
    assert 'played STAY (unparseable: no JSON object' in anomaly.evidence
    assert '[agent 1] action output: {"action": "collect_n' in anomaly.evidence
    assert "unexpected keyword 'coord_x'" in anomaly.evidence and "update=6 " in anomaly.evidence


def test_the_failed_outputs_are_found_by_their_words_in_another_template_s_transcript() -> None:
    anomaly = detect_invalid_rise(records_for(7, invalid_rates(CLIMB)), CONFIG, lambda: STAGHUNT_SAMPLES)
    assert anomaly is not None
    assert '[hunter 1] action_output: {"action": "hunt", "agent_id": 1, "args": {}\n[hunter 1] parsed_call: null' \
        in anomaly.evidence
    assert "thinking_output" not in anomaly.evidence and "1 failed actions" in anomaly.message


def test_samples_are_read_only_when_the_rate_climbs() -> None:
    def unreadable() -> str:
        raise AssertionError("read Sample_EP.logs for a healthy run")

    assert detect_invalid_rise(HEALTHY, CONFIG, unreadable) is None


@pytest.mark.parametrize("rates", [
    pytest.param({u: 0.8 for u in range(1, 21)}, id="invalid-from-the-start"),  # the after-run check's case
    pytest.param({12: 0.9}, id="one-bad-update"),
    pytest.param({12: 0.7, 14: 0.7}, id="two-bad-updates-apart"),
    pytest.param({u: 0.3 + u / 100 for u in range(1, 21)}, id="slow-drift-of-0.2"),
])
def test_an_invalid_rate_that_does_not_climb_far_is_no_anomaly(rates: dict[int, float]) -> None:
    assert detect_invalid_rise(records_for(20, invalid_rates(rates)), CONFIG) is None


def test_a_climbing_invalid_rate_stops_the_run_before_a_reward_collapse_is_judged() -> None:
    kinds = [a.kind for a in detect_all(records_for(7, invalid_rates(CLIMB)), samples=lambda: CLEANUP_SAMPLES)]
    assert kinds == ["invalid_action_rise"]


FLAT = {"reward_std": 0.0, "frac_reward_zero_std": 1.0}


@pytest.mark.parametrize(("updates", "overrides", "fires_at"), [
    (20, lambda u: FLAT, 20),
    (30, from_update(6, **FLAT), 25),
    (19, lambda u: FLAT, None),
    (30, lambda u: FLAT if u % 15 else {}, None),
    (30, lambda u: {"reward_std": 0.0}, None),
])
def test_flat_reward_needs_k_consecutive_flat_updates(updates: int, overrides: Overrides,
                                                      fires_at: int | None) -> None:
    anomaly = detect_flat_reward(records_for(updates, overrides), CONFIG)
    assert (anomaly.update if anomaly else None) == fires_at
    assert anomaly is None or (anomaly.kind, anomaly.serious) == ("flat_reward", False)


def test_flat_reward_serious_when_configured() -> None:
    anomaly = detect_flat_reward(records_for(20, lambda u: FLAT), replace(CONFIG, flat_reward_serious=True))
    assert anomaly is not None and anomaly.serious


# ---------------------------------------------------------------- hang


LAST_TRAIN = T0 + 10 * STEP


@pytest.mark.parametrize(("now", "hung"), [
    (LAST_TRAIN + timedelta(seconds=1801), True),
    (LAST_TRAIN + timedelta(seconds=1799), False),
    ((LAST_TRAIN + timedelta(seconds=1801)).astimezone(timezone.utc), True),
])
def test_hang_measured_from_last_train_line(now: datetime, hung: bool) -> None:
    anomaly = detect_hang(records_for(10, eval_every=100), now, now, CONFIG)
    assert (anomaly is not None) == hung
    if anomaly:
        assert (anomaly.kind, anomaly.serious, anomaly.update) == ("hung", True, 10)
        assert "update=10 " in anomaly.evidence


def test_hang_counts_eval_lines_as_progress() -> None:
    records = records_for(10)  # eval after update 10, 1 s after its train line
    assert detect_hang(records, LAST_TRAIN + timedelta(seconds=1800.5), None, CONFIG) is None


def test_hang_ignores_output_once_updates_are_logged() -> None:
    now = LAST_TRAIN + timedelta(hours=1)
    assert detect_hang(records_for(10, eval_every=100), now, now - timedelta(seconds=5), CONFIG) is not None


@pytest.mark.parametrize(("start_age", "output_age", "hung"), [
    (3600, 10, False),   # loading or first rollout still printing
    (3600, None, True),
    (100, 3600, False),
    (3600, 3600, True),
    (None, 3600, True),  # no start line yet: only the process output tells
    (None, 10, False),
    (None, None, False),  # nothing to measure from
])
def test_hang_before_first_update(start_age: int | None, output_age: int | None, hung: bool) -> None:
    now = T0 + timedelta(hours=2)
    records = records_for(0, start=now - timedelta(seconds=start_age)) if start_age is not None else []
    output_at = now - timedelta(seconds=output_age) if output_age is not None else None
    anomaly = detect_hang(records, now, output_at, CONFIG)
    assert (anomaly is not None) == hung
    assert anomaly is None or anomaly.update is None


def test_finished_run_is_not_hung() -> None:
    assert detect_hang(HEALTHY, T0 + timedelta(days=1), None, CONFIG) is None


# ---------------------------------------------------------------- stderr


TRACEBACK = """\
Traceback (most recent call last):
  File "/work/run/train.py", line 587, in <module>
    main()
  File "/work/run/train.py", line 560, in train
    rollout = play_episodes(engine, trainer.tokenizer, config, [seed] * config.group_size, record)
              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
KeyError: 'agent_3'
"""
OOM = TRACEBACK.replace(
    "KeyError: 'agent_3'",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.02 GiB is free.")
NCCL = ("[rank1]:[E1123 09:41:02.123 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout\n"
        "node1:1234:1250 [1] NCCL WARN Cuda failure 'out of memory'\n")
LAUNCHER = """\
Traceback (most recent call last):
  File "/usr/bin/accelerate", line 8, in <module>
    sys.exit(main())
subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit status 1.
"""


@pytest.mark.parametrize(("stderr", "kind", "shown"), [
    (OOM, "cuda_oom", "Tried to allocate 2.00 GiB"),
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n", "nccl_error", "NCCL error"),
    (NCCL, "nccl_error", "NCCL WARN Cuda failure"),
    ("ncclInternalError: Internal check failed.\n", "nccl_error", "ncclInternalError"),
    ("warming up\n" + TRACEBACK, "crash", "KeyError: 'agent_3'"),
])
def test_detect_stderr_kinds(stderr: str, kind: str, shown: str) -> None:
    anomaly = detect_stderr(stderr)
    assert anomaly is not None
    assert (anomaly.kind, anomaly.serious, anomaly.update) == (kind, True, None)
    assert shown in anomaly.message and shown in anomaly.evidence and "\n" not in anomaly.message


@pytest.mark.parametrize("stderr", [
    "",
    "/usr/lib/python3.11/site-packages/transformers/generation/utils.py:1: UserWarning: do_sample is set\n",
    "Loading checkpoint shards: 100%|##########| 2/2 [00:01<00:00,  1.50it/s]\n",
])
def test_detect_stderr_quiet_on_warnings(stderr: str) -> None:
    assert detect_stderr(stderr) is None


def test_crash_evidence_is_the_last_traceback_not_the_launchers() -> None:
    earlier = TRACEBACK.replace("KeyError: 'agent_3'", "ValueError: first")
    anomaly = detect_stderr(earlier + "retrying\n" + TRACEBACK + LAUNCHER)
    assert anomaly is not None
    assert anomaly.evidence == TRACEBACK.strip("\n")
    assert "KeyError: 'agent_3'" in anomaly.message


def test_crash_with_rank_prefixes_and_a_long_traceback_is_trimmed_from_the_top() -> None:
    frame = '  File "/lib/module.py", line 10, in call\n    return self.forward(*args)\n'
    body = TRACEBACK.replace("    main()\n", "    main()\n" + frame * 100)
    ranked = "".join(f"[rank0]: {text}\n" for text in body.splitlines())
    anomaly = detect_stderr(ranked)
    assert anomaly is not None and anomaly.kind == "crash"
    assert len(anomaly.evidence) <= EVIDENCE_LIMIT
    assert anomaly.evidence.startswith("...\n") and anomaly.evidence.endswith("KeyError: 'agent_3'")


# ---------------------------------------------------------------- detect_all


def test_detect_all_puts_serious_first() -> None:
    records = records_for(25, lambda u: {**FLAT, **({"kl": 5.0} if u == 22 else {})})
    anomalies = detect_all(records, stderr_tail=TRACEBACK, now=T0 + timedelta(days=1))
    assert [(a.kind, a.serious) for a in anomalies] == [
        ("crash", True), ("kl_blowup", True), ("hung", True), ("flat_reward", False)]


def test_detect_all_quiet_on_healthy_run() -> None:
    assert detect_all(HEALTHY, stderr_tail="UserWarning: fine\n", now=T0 + timedelta(days=1)) == []


def test_detect_all_skips_hang_without_now() -> None:
    assert detect_all(records_for(10, eval_every=100)) == []


def test_detect_all_looks_at_the_latest_run_only() -> None:
    old = make_log(5, at(3, loss=math.nan))
    new = make_log(5, start=T0 + timedelta(hours=1))
    assert [a.kind for a in detect_all(parse_log(old))] == ["nan_loss"]
    assert detect_all(parse_log(old + new)) == []


# ---------------------------------------------------------------- LogTail


def test_log_tail_reads_appended_pieces_and_keeps_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "train.logs"
    tail = LogTail(path)
    assert tail.poll() == []

    start, train1, eval1, train2 = make_log(2, eval_every=1).splitlines()[:4]
    with path.open("a") as fh:
        fh.write(start + "\n" + train1[:40])
    assert [r.kind for r in tail.poll()] == ["start"]
    assert tail.poll() == []

    with path.open("a") as fh:
        fh.write(train1[40:] + "\nsome warning\n" + eval1 + "\n" + train2)
    new = tail.poll()
    assert [(r.kind, r.line_no) for r in new] == [("train", 2), ("eval", 4)]
    assert new[0].raw == train1

    with path.open("a") as fh:
        fh.write("\n")
    assert [r.raw for r in tail.poll()] == [train2]
    assert [r.kind for r in tail.records] == ["start", "train", "eval", "train"]


def test_log_tail_restarts_on_a_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "train.logs"
    path.write_text(make_log(3))
    tail = LogTail(path)
    assert len(tail.poll()) == 4
    path.write_text(make_log(1))
    assert [(r.kind, r.line_no) for r in tail.poll()] == [("start", 1), ("train", 2)]
    assert len(tail.records) == 2


# ---------------------------------------------------------------- progress and trends


def test_progress_eta_from_last_five_step_times() -> None:
    records = records_for(6, lambda u: {"step_time": 10.0 * u, "loss": 0.25, "reward_mean": -0.5}, total=10)
    assert progress(records) == Progress(update=6, total_updates=10, episode=12, reward_mean=-0.5, loss=0.25,
                                         eta_seconds=(20 + 30 + 40 + 50 + 60) / 5 * 4)


def test_progress_of_json_lines_with_trl_style_keys() -> None:
    """A researcher's JSON-lines log: `step`, `total_steps`, `episodes` (played so far), `reward`."""
    text = ('{"event": "start", "total_steps": 4}\n'
            '{"event": "train", "step": 2, "episodes": 8, "reward": 0.5, "loss": -0.04, "seconds": 3.0}\n')
    assert progress(parse_log(text)) == Progress(update=2, total_updates=4, episode=8, reward_mean=0.5, loss=-0.04,
                                                 eta_seconds=6.0)


def test_progress_before_first_update() -> None:
    assert progress(records_for(0, total=10)) == Progress(None, 10, None, None, None, None)
    assert progress([]) == Progress(None, None, None, None, None, None)


def test_progress_finished_run_has_zero_eta() -> None:
    assert progress(HEALTHY).eta_seconds == 0.0
    assert progress(HEALTHY).update == 30


def test_summarize_trends() -> None:
    records = records_for(8, lambda u: {"reward_mean": [0.1, 0.3, 0.9, 0.2, 0.4, 0.5, 0.6, 0.7][u - 1],
                                        "invalid_action_rate": 1.0 - u / 10, "completion_clipped_ratio": 0.25},
                          eval_every=4)
    trends = summarize_trends(records)
    assert trends == pytest.approx({
        "updates": 8, "reward_mean_first": 0.1, "reward_mean_last": 0.7, "reward_mean_best": 0.9,
        "invalid_action_rate_first_quarter": 0.85, "invalid_action_rate_last_quarter": 0.25,
        "completion_clipped_ratio_mean": 0.25, "eval_reward_mean_last": 0.58})


def test_summarize_trends_leaves_out_missing_data() -> None:
    assert summarize_trends(records_for(0)) == {"updates": 0.0}


def test_a_researchers_own_log_formats_are_read_with_one_metric_vocabulary():
    records = parse_log(
        '{"event": "start", "max_steps": 4}\n'
        '{"event": "train", "step": 1, "loss": 0.5, "gradNorm": 1.2, "reward": 0.1, "learning_rate": 1e-6}\n'
        "[2026-11-23 10:00:00] step=2 | loss=0.52 | train/grad_norm=1.3\n"
        "{'step': 3, 'loss': 0.4, 'grad_norm': nan}\n"
        "a warning line\n")
    assert [r.kind for r in records] == ["start", "train", "train", "train"]
    assert records[0].values == {"updates": 4.0}
    assert records[1].values == {"update": 1.0, "loss": 0.5, "grad_norm": 1.2, "reward_mean": 0.1, "lr": 1e-6}
    assert records[2].values == {"update": 2.0, "loss": 0.52, "grad_norm": 1.3} and records[2].time is not None
    assert math.isnan(records[3].values["grad_norm"])


# the launchers' real reports (accelerate launch over torch elastic, 2 CPU processes), captured: rank 1 killed by
# SIGSEGV after training; rank 1 raising its own RuntimeError
LAUNCHER_SEGV = (Path(__file__).parent / "fixtures" / "launcher_segv_stderr.txt").read_text()
LAUNCHER_RANK_ERROR = (Path(__file__).parent / "fixtures" / "launcher_rank_error_stderr.txt").read_text()


def test_a_launcher_failure_s_evidence_names_each_failed_rank_and_its_signal() -> None:
    anomaly = detect_stderr(LAUNCHER_SEGV)
    assert anomaly is not None and anomaly.kind == "crash" and anomaly.serious
    assert "rank 1 (local_rank: 1) on localhost: exit code -11 (Signal 11 (SIGSEGV)" in anomaly.message
    assert anomaly.evidence.index("SIGSEGV") < anomaly.evidence.index("SIGTERM")  # the root cause first


def test_a_rank_s_own_error_is_the_evidence_not_the_launcher_s() -> None:
    anomaly = detect_stderr(LAUNCHER_RANK_ERROR, logged_done=True)
    assert anomaly is not None and anomaly.kind == "crash" and anomaly.serious  # an error of the code, after done
    assert "after train.logs said done: RuntimeError: rank one broke on exit" in anomaly.message
    assert 'File "/w/generated/train.py", line 12, in inner' in anomaly.evidence and "[rank1]" not in anomaly.evidence


def test_a_signal_after_done_is_not_serious() -> None:
    anomaly = detect_stderr(LAUNCHER_SEGV, logged_done=True)
    assert anomaly is not None and anomaly.kind == "exit_after_done" and not anomaly.serious
