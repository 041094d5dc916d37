"""The ideas of a run's future_improvements.md, numbered in the order the review wrote them.

The review writes each idea as a `## title` section with an `Evidence:` line (orchestrator.nodes.review). An idea is
chosen by its number, its heading, or words only one heading holds (case and spacing aside); anything else is bad
input naming the ideas there are.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

IDEAS_FILE = "future_improvements.md"
_HEADING = re.compile(r"^##\s+(.+?)\s*$")


class IdeaError(ValueError):
    """An idea that cannot be chosen; the message names the ideas there are."""


@dataclass(frozen=True)
class Idea:
    number: int  # 1-based, in the file's order; 0 for an idea given as free text
    title: str
    text: str  # the section's body: what to change and the evidence for it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Idea:
        return cls(int(data["number"]), str(data["title"]), str(data["text"]))

    @property
    def label(self) -> str:
        return f"idea {self.number}: {self.title}" if self.number else f"idea: {self.title}"


def read_ideas(text: str) -> list[Idea]:
    """Every `## title` section of `text`, with its body up to the next heading."""
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        found = _HEADING.match(line)
        if found:
            sections.append((found.group(1), []))
        elif sections:
            sections[-1][1].append(line)
    return [Idea(number, title, "\n".join(lines).strip()) for number, (title, lines) in enumerate(sections, 1)]


def free_idea(text: str) -> Idea:
    """An idea given on the command line: its first line is its title."""
    text = text.strip()
    if not text:
        raise IdeaError("--idea is empty: describe the change to try, e.g. --idea \"give each agent a role\"")
    return Idea(0, text.splitlines()[0][:120], text)


def _words(text: str) -> str:
    return " ".join(text.lower().split())


def choose(path: Path, key: str) -> Idea:
    """The idea `key` names in the file at `path` (a number, a heading, or words of one heading only)."""
    if not path.is_file():
        raise IdeaError(f"{path} does not exist: the run has no ideas to try (its review did not run); give the "
                        f"idea as text with --idea \"...\"")
    ideas = read_ideas(path.read_text(encoding="utf-8"))
    listed = "; ".join(f"{i.number} {i.title}" for i in ideas) or "none"
    if key.strip().isdigit():
        number = int(key)
        if not 1 <= number <= len(ideas):
            raise IdeaError(f"idea {number}: {path} has {len(ideas)} idea(s): {listed}")
        return ideas[number - 1]
    wanted = _words(key)
    exact = [i for i in ideas if _words(i.title) == wanted]
    holding = exact or [i for i in ideas if wanted and wanted in _words(i.title)]
    if len(holding) != 1:
        how = "several headings hold" if holding else "no heading is or holds"
        raise IdeaError(f"idea {key!r}: {how} these words in {path}; give its number: {listed}")
    return holding[0]
