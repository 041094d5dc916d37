"""One broken rule: which, where, and what to do about it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    rule: str
    file: str
    line: int | None
    message: str  # what is wrong and what to do about it
    severity: str = "error"  # "warning": reported, never a failure

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        prefix = "warning " if self.severity == "warning" else ""
        return f"{prefix}{self.rule} {where}: {self.message}"


def errors(violations: Iterable[Violation]) -> list[Violation]:
    return [v for v in violations if v.severity != "warning"]
