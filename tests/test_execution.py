import sys
from pathlib import Path

from orchestrator.base.execution import execute, last_traceback, strip_progress_bars, tail


def test_captures_output_and_exit_code(tmp_path: Path):
    result = execute([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                     tmp_path, timeout_s=60)
    assert (result.returncode, result.stdout, result.stderr, result.ok) == (3, "out\n", "err\n", False)


def test_timeout_kills_the_whole_process_group(tmp_path: Path):
    # the child starts a grandchild that would outlive it; both must be gone after the timeout
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
              "open('grandchild.pid', 'w').write(str(p.pid)); print('started', flush=True); time.sleep(600)")
    result = execute([sys.executable, "-c", script], tmp_path, timeout_s=3, grace_s=1)
    assert result.timed_out and result.returncode is None and result.stdout == "started\n"
    pid = int((tmp_path / "grandchild.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_missing_program_is_a_result_not_an_exception(tmp_path: Path):
    result = execute(["definitely-not-a-program-xyz"], tmp_path, timeout_s=5)
    assert result.returncode == 127 and "cannot start" in result.stderr


def test_last_traceback_is_extracted_through_the_exception_line():
    text = ("noise\nTraceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    x()\n"
            "NameError: old\nmore\nTraceback (most recent call last):\n  File \"b.py\", line 2, in f\n"
            "    import helpers\nModuleNotFoundError: No module named 'helpers'\ntrailing line\n")
    assert last_traceback(text) == ("Traceback (most recent call last):\n  File \"b.py\", line 2, in f\n"
                                    "    import helpers\nModuleNotFoundError: No module named 'helpers'")
    assert last_traceback("all fine") == ""


def test_tail_cuts_at_a_line_boundary():
    assert tail("aaaa\nbbbb\ncccc", 7) == "cccc"
    assert tail("short", 100) == "short"


def test_progress_bar_redraws_and_colours_are_dropped():
    assert strip_progress_bars("Loading:  0%\rLoading: 100%\n\x1b[31mError\x1b[0m here") == "Loading: 100%\nError here"
