"""The outputs a run's Sample_EP.logs shows failing: each line that says an action could not be parsed or was
refused, with the output line it follows.

Read by the words a transcript uses for a failure, not by a template's layout: ``unparseable``, ``could not
parse``, ``parse error``, ``JSONDecodeError``, ``invalid:`` / ``invalid(`` / ``invalid=``, ``valid=False``,
``"valid": false``. The output shown with a failure is the nearest line above it (at most ``LOOK_BACK`` lines)
that names an output, a completion or a response; the lines between them (the parsed call) are shown too.
The newest failures are shown, since the end of the file is what the run wrote last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FAILURE = re.compile(r"\bunpars(?:e)?able\b|\b(?:could ?n[o']t|cannot|failed to|unable to) (?:be )?parsed?\b|"
                     r"\bparse error\b|JSONDecodeError|\binvalid\s*[:=(]|\bvalid\s*[=:]\s*(?:false|no|0)\b|"
                     r"\"valid\":\s*false\b", re.IGNORECASE)
OUTPUT = re.compile(r"output|completion|response|generated|answer", re.IGNORECASE)
LOOK_BACK = 4
SHOWN = 4  # failures shown, newest last
LINE_CHARS = 240
TEXT_CHARS = 1200


@dataclass(frozen=True)
class FailedOutputs:
    count: int  # failure lines in the text read
    text: str  # the newest failures, each with its output, for the evidence

    @property
    def summary(self) -> str:
        if not self.count:
            return "Sample_EP.logs shows no failed action in its latest episodes"
        shown = min(self.count, SHOWN)
        return f"Sample_EP.logs shows {self.count} failed actions in its latest episodes (the last {shown} below)"


def _clip(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 3] + "..."


def failed_outputs(samples: str) -> FailedOutputs:
    """The failures in `samples` (the end of a Sample_EP.logs), the newest SHOWN of them with their outputs."""
    lines = samples.splitlines()
    failures = [i for i, line in enumerate(lines) if FAILURE.search(line)]
    blocks = []
    for i in failures[-SHOWN:]:
        start = next((j for j in range(i - 1, max(-1, i - 1 - LOOK_BACK), -1) if OUTPUT.search(lines[j])), i)
        blocks.append("\n".join(_clip(line) for line in lines[start:i + 1]))
    text = "\n--\n".join(blocks)
    if len(text) > TEXT_CHARS:
        text = "...\n" + text[-(TEXT_CHARS - 4):]
    header = "Sample_EP.logs, failed actions (newest last):\n" if blocks else ""
    return FailedOutputs(len(failures), header + text)
