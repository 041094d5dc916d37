"""A SLURM site's options and limits, the checkpoints a formal attempt saved, and the time a plan is estimated at:
pure functions over strings and folders, no cluster."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.training.checkpoints import checkpoints, latest_update, link_restart_point
from orchestrator.training.logformat import LogRecord
from orchestrator.training.pace import Pace, estimate_seconds, seconds_per_update
from orchestrator.training.machine import SlurmCluster, parse_slurm_nodes
from orchestrator.training.sizing import ModelShape, node_request, over_limits
from orchestrator.training.slurm_site import (PartitionLimits, clock, describe_options, effective_options, env_options,
                                     option_flag, parse_partitions, slurm_seconds)


@pytest.mark.parametrize("pair, flag", [("partition=long", "--partition=long"), ("--account=lab", "--account=lab"),
                                        ("time=2-00:00:00", "--time=2-00:00:00"), ("no-requeue", "--no-requeue")])
def test_an_sbatch_option_is_given_as_key_value_or_a_flag(pair: str, flag: str):
    assert option_flag(pair) == flag


@pytest.mark.parametrize("pair", ["Partition=x", "=x", "time=", "two words=1"])
def test_an_option_that_is_no_sbatch_long_option_is_refused_saying_what_to_write(pair: str):
    with pytest.raises(ValueError, match="KEY=VALUE|give a value"):
        option_flag(pair)


def test_the_later_source_wins_and_each_option_says_where_it_came_from():
    env = {"SBATCH_PARTITION": "debug", "SBATCH_TIMELIMIT": "30", "SBATCH_ACCOUNT": "lab", "SBATCH_NO_REQUEUE": "1",
           "HOME": "/root"}
    assert env_options(env) == ["--account=lab", "--partition=debug", "--time=30", "--no-requeue"]
    options = effective_options(["--time=10:00", "--mem=2G", "-c", "2"], env, ["--partition=short"],
                                ["--exclude=node1"])
    assert options == {"time": ("30", "SBATCH_TIMELIMIT"), "mem": ("2G", "#SBATCH"), "account": ("lab", "SBATCH_ACCOUNT"),
                       "partition": ("short", "--sbatch-option"), "no-requeue": ("", "SBATCH_NO_REQUEUE"),
                       "exclude": ("node1", "orchestrator")}
    assert describe_options(options).startswith("--time=30 (SBATCH_TIMELIMIT), --mem=2G (#SBATCH)")
    assert describe_options({}) == "(none)"


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("1:30", 90), ("01:00:00", 3600), ("2-0", 172800),
                                           ("1-02:03", 93780), ("1-02:03:04", 93784), ("UNLIMITED", None),
                                           ("INFINITE", None)])
def test_slurm_times_read_as_sbatch_reads_them(text: str, seconds):
    assert slurm_seconds(text) == seconds


def test_a_time_that_is_no_slurm_time_is_an_error_and_seconds_print_as_slurm_writes_them():
    with pytest.raises(ValueError, match="not a SLURM time"):
        slurm_seconds("1h")
    assert (clock(60), clock(93784), clock(None)) == ("00:01:00", "1-02:03:04", "UNLIMITED")


PARTITIONS = ("PartitionName=short AllowGroups=ALL DefaultTime=NONE MaxNodes=1 MaxTime=00:01:00 MinNodes=0 "
              "MaxCPUsPerNode=2 MaxMemPerNode=4000 Nodes=node1 State=UP\n"
              "PartitionName=debug AllowGroups=ALL Default=YES DefaultTime=00:30:00 MaxNodes=UNLIMITED "
              "MaxTime=UNLIMITED MaxCPUsPerNode=UNLIMITED MaxMemPerNode=UNLIMITED Nodes=node[1-2] State=UP\n")
CLUSTER = SlurmCluster(parse_slurm_nodes("node1|debug*|2|8000|(null)|idle\nnode1|short|2|8000|(null)|idle\n"
                                         "node2|debug*|2|8000|(null)|idle\n").nodes, "debug",
                       tuple(parse_partitions(PARTITIONS).values()))


def test_partition_limits_come_from_scontrol():
    short, debug = parse_partitions(PARTITIONS).values()
    assert short == PartitionLimits("short", max_time_s=60, max_nodes=1, max_mem_per_node_mb=4000, max_cpus_per_node=2)
    assert debug == PartitionLimits("debug", default_time_s=1800)
    assert (short.time_limit_s(None), debug.time_limit_s(None), debug.time_limit_s(90)) == (60, 1800, 90)


def test_a_request_beyond_its_partition_s_limits_is_refused_with_both_numbers():
    script = "#!/bin/bash\n#SBATCH --time=2:00:00\n#SBATCH --nodes=2 --mem=8G -c 4\nsrun true\n"
    problem = over_limits(node_request(script, ["--partition=short"]), CLUSTER)
    assert problem.startswith("the job asks partition short for --time 02:00:00 (7200 s) where its MaxTime is "
                              "00:01:00 (60 s); 2 nodes where its MaxNodes is 1; 8192 MB per node where its "
                              "MaxMemPerNode is 4000 MB; 4 CPUs per node where its MaxCPUsPerNode is 2")
    assert "--sbatch-option partition=" in problem
    assert over_limits(node_request(script, []), CLUSTER) is None  # debug: no limit
    assert over_limits(node_request("#!/bin/bash\n", ["-p", "short", "-t", "1"]), CLUSTER) is None


def test_checkpoints_are_found_by_name_and_the_restart_point_is_the_newest_before_the_anomaly(tmp_path: Path):
    earlier, later = tmp_path / "formal-1", tmp_path / "formal-2"
    for name in ("outputs/run/checkpoint-2", "outputs/run/checkpoint-4", "outputs/run/checkpoint-6",
                 "outputs/run/checkpoint-8.partial", "outputs/run/final", "outputs/run/checkpoint-10"):
        (earlier / name).mkdir(parents=True)
        (earlier / name / "model.safetensors").write_bytes(b"w")
    (earlier / "outputs/run/checkpoint-12").mkdir()  # an empty folder is no checkpoint
    assert [u for u, _ in checkpoints(earlier)] == [2, 4, 6, 10] and latest_update(earlier) == 10
    assert latest_update(later) is None
    update, link = link_restart_point(earlier, later, before_update=7)
    assert (update, link) == (6, later / "outputs/run/checkpoint-6")
    assert link.is_symlink() and (link / "model.safetensors").read_bytes() == b"w"
    assert [u for u, _ in checkpoints(later)] == [6]
    assert link_restart_point(earlier, tmp_path / "formal-3", before_update=2) is None


def record(update: int, at: datetime, **values) -> LogRecord:
    return LogRecord(kind="train", values={"update": float(update), **values}, raw="", line_no=update, time=at)


def test_the_pace_is_the_median_step_time_else_the_time_between_updates():
    start = datetime(2026, 11, 27, 10, 0, 0)
    assert seconds_per_update([record(u, start, step_time=float(s)) for u, s in ((1, 4), (2, 2), (3, 3))]) == 3.0
    assert seconds_per_update([record(u, start + timedelta(seconds=5 * u)) for u in (1, 2, 3)]) == 5.0
    assert seconds_per_update([record(1, start)]) is None


def test_a_plan_is_estimated_from_the_check_s_pace_scaled_by_tokens_parameters_and_updates():
    pace = Pace(2.0, {"group_generations": 2, "agent_count": 2, "episode_turns": 3, "thinking_cap": 40,
                      "action_cap": 40}, "tiny")
    formal = {"group_generations": 8, "agent_count": 2, "episode_turns": 3, "thinking_cap": 40, "action_cap": 40,
              "updates_total": 100}
    small, large = ModelShape(1_000, 8, 2, 10, 1, 8), ModelShape(4_000, 8, 2, 10, 1, 8)
    seconds, how = estimate_seconds(pace, formal, small, large)
    assert seconds == 2.0 * 4 * 4 * 100
    assert how == "the runtime check's 2.00 s per update x 4 (tokens per update) x 4 (parameters) x 100 updates"
    assert estimate_seconds(pace, {**formal, "updates_total": None, "episodes_total": 80}, None, None)[0] == 2.0 * 4 * 10
    assert estimate_seconds(pace, {"group_generations": 8}, None, None) is None


def test_options_given_on_resume_replace_those_of_the_same_key_given_before():
    from orchestrator.runner import merged_options

    assert merged_options(["--partition=debug", "--account=lab", "--no-requeue"], ["--partition=long", "--qos=high"]) \
        == ["--account=lab", "--no-requeue", "--partition=long", "--qos=high"]
