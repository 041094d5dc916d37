"""The log's metric roles: which of the researcher's keys hold the reward, the invalid-action rate, the loss and the
KL. The first guess reads the vocabulary and the words of other names, an answer fills only what the guess left
empty and is checked on the log itself, and the monitor then judges the researcher's own names: an invalid rate
climbing 0.1 -> 0.82 and a reward falling 1.6 -> -2.0, logged as `invalid_frac` and `ret_mean` by Python logging or
as `bad_action_rate` in a tqdm postfix, raise the same anomalies as the vocabulary's names."""

from __future__ import annotations

import pytest

from orchestrator.training.logformat import LogFormat, parse_log
from orchestrator.training.metric_roles import MetricRoles, first_guess, validate_answer
from orchestrator.training.monitor import MonitorConfig, detect_all

UPDATES = 12


def climbing(update: int) -> tuple[float, float]:
    """(reward, invalid rate) at `update`: steady for 3 updates, then the format is lost."""
    if update <= 3:
        return 1.6, 0.1
    share = (update - 3) / (UPDATES - 3)
    return 1.6 - 3.6 * share, 0.1 + 0.72 * share


def logging_lines(reward: str, invalid: str) -> str:
    """Python logging's default format, key=value pairs."""
    return "\n".join(f"2026-11-25 10:00:{u:02d},123 - grpo - INFO - update={u} loss=0.05 kl=0.01 "
                     f"{reward}={climbing(u)[0]:.3f} {invalid}={climbing(u)[1]:.3f}" for u in range(1, UPDATES + 1))


def tqdm_lines(reward: str, invalid: str) -> str:
    """A tqdm bar redrawn with carriage returns, its postfix holding the metrics."""
    return "\n".join(f"\r{u * 100 // UPDATES}%|##   | {u}/{UPDATES} [00:{u:02d}<00:10, 1.00it/s, loss=0.05, "
                     f"{reward}={climbing(u)[0]:.3f}, {invalid}={climbing(u)[1]:.3f}]" for u in range(1, UPDATES + 1))


def anomalies(text: str, log_format: LogFormat) -> set[str]:
    return {a.kind for a in detect_all(parse_log(text, log_format), config=MonitorConfig())}


@pytest.mark.parametrize("write", [logging_lines, tqdm_lines])
@pytest.mark.parametrize("reward, invalid", [("ret_mean", "invalid_frac"), ("avg_return", "bad_action_rate"),
                                             ("reward", "invalid_rate")])
def test_the_monitor_judges_the_researchers_own_names(write, reward: str, invalid: str) -> None:
    text = write(reward, invalid)
    roles = first_guess(parse_log(text))
    assert roles.keys["reward"] in (reward, "reward_mean") and roles.keys["invalid_rate"] in (invalid, "invalid_action_rate")
    assert not roles.off()
    read = LogFormat(keys=roles.format_keys())
    assert {"invalid_action_rise", "reward_collapse"} <= anomalies(text, read)


def test_without_the_roles_the_same_numbers_raise_nothing_and_the_off_detectors_are_said() -> None:
    text = logging_lines("payout_p50", "oops_share")
    roles = first_guess(parse_log(text))
    assert "reward" not in roles.keys
    assert not {"invalid_action_rise", "reward_collapse"} & anomalies(text, LogFormat(keys=roles.format_keys()))
    assert any(off.startswith("reward_collapse") for off in roles.off())


def test_an_answer_fills_only_what_the_guess_left_empty_and_is_checked_on_the_log() -> None:
    records = parse_log(logging_lines("payout", "format_err"))
    guessed = first_guess(records)
    assert set(guessed.missing()) == {"reward", "invalid_rate"}
    with pytest.raises(ValueError, match="not a metric of the log"):
        validate_answer({"reward": "payoff"}, records, guessed)
    with pytest.raises(ValueError, match="not a rate between 0 and 1"):
        validate_answer({"invalid_rate": "payout"}, records, guessed)
    learned = validate_answer({"reward": "payout", "invalid_rate": "format_err", "loss": "kl"}, records, guessed)
    assert learned.keys == {**guessed.keys, "reward": "payout", "invalid_rate": "format_err"}
    assert learned.sources["reward"] == "LLM" and learned.sources["loss"] == "vocabulary"
    assert MetricRoles.from_dict(learned.to_dict()) == learned
    text = logging_lines("payout", "format_err")
    assert {"invalid_action_rise", "reward_collapse"} <= anomalies(text, LogFormat(keys=learned.format_keys()))


def test_a_statistic_other_than_the_mean_or_an_evaluation_is_not_the_reward() -> None:
    text = "\n".join(f"update={u} loss=0.1 ret_std=0.5 eval_ret_mean=1.0 ret_mean=0.{u}" for u in range(1, 4))
    assert first_guess(parse_log(text)).keys["reward"] == "ret_mean"
