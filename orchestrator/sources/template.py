"""Reading any researcher's GRPO template: its GENERIC and CUSTOMIZE sections, by the brief's markers.

The brief names two marker lines, `# === CUSTOMIZE ===` and `# === GENERIC — DO NOT MODIFY ===`; a
section runs from its marker to the next marker line. End markers (`# === END ... ===`) are an
optional extra: one closes the open section, and the text after it up to the next start marker is
outside every section. Hole names, `# HOLE` lines and any particular layout are never required.
Markers may be indented (a hole inside a class body) and are recognised loosely (`=` runs of any
length, a hyphen for the em dash, case, words after the label), so a researcher's spelling is taken
as theirs; a generated train.py must then repeat each of the template's marker lines exactly. A line
inside a multi-line string (a docstring that shows the markers) is never a marker.

Step 3 fills the holes (`fill_holes`): train.py is the template with new code in its CUSTOMIZE
sections, every other line the template's own.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

GENERIC = "generic"
CUSTOMIZE = "customize"
END = "end"

_MARKER = re.compile(r"^\s*#\s*={2,}\s*(?P<label>[^=]*?)\s*={2,}.*$")


@dataclass(frozen=True)
class Section:
    kind: str  # GENERIC or CUSTOMIZE
    index: int  # 0-based among the sections of its kind
    start_line: int  # 1-based line of its marker
    marker: str  # the marker line as written, without its newline
    text: str  # the lines after the marker up to the next marker (or end marker, or end of file)

    @property
    def end_line(self) -> int:
        """The last line of the section's body (its marker line when the body is empty)."""
        return self.start_line + len(split_lines(self.text))

    def describe(self) -> str:
        return f"the {ordinal(self.index + 1)} {self.kind.upper()} section (template line {self.start_line})"


class TemplateError(ValueError):
    """Section markers that cannot be read; `line` is where, the message says what to change."""

    def __init__(self, line: int | None, problem: str) -> None:
        super().__init__(f"line {line}: {problem}" if line else problem)
        self.line, self.problem = line, problem


def marker_kind(line: str) -> str | None:
    """GENERIC, CUSTOMIZE, "end" for an end marker, or None for any other line."""
    match = _MARKER.match(line)
    if match is None:
        return None
    label = re.sub(r"[^A-Z]", "", match["label"].upper())
    if label.startswith("END") and ("GENERIC" in label or "CUSTOMI" in label or label == "END"):
        return END
    if label.startswith("GENERIC"):
        return GENERIC
    if label.startswith("CUSTOMI"):  # CUSTOMIZE or CUSTOMISE
        return CUSTOMIZE
    return None


def read_sections(text: str) -> list[Section]:
    """The sections of a template or train.py, in order; TemplateError when an end marker closes nothing."""
    sections: list[Section] = []
    open_section: tuple[str, int, str] | None = None  # kind, line, marker
    body: list[str] = []

    def close() -> None:
        kind, line, marker = open_section
        index = sum(s.kind == kind for s in sections)
        sections.append(Section(kind, index, line, marker, "".join(body)))

    quoted = string_lines(text)
    for number, line in enumerate(split_lines(text), start=1):
        kind = marker_kind(line) if number not in quoted else None
        if kind is None:
            body.append(line)
            continue
        if kind == END:
            if open_section is None:
                raise TemplateError(number, f"{line.strip()!r} closes no open section; remove it or put a "
                                            f"'# === CUSTOMIZE ===' or '# === GENERIC — DO NOT MODIFY ===' line before it")
            close()
            open_section = None
            continue
        if open_section is not None:
            close()
        open_section, body = (kind, number, line.rstrip("\r\n")), []
    if open_section is not None:
        close()
    return sections


def string_lines(text: str) -> set[int]:
    """Lines inside a multi-line string (a docstring that quotes a marker is not a marker); none when
    the text does not tokenize."""
    inside: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                inside.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return set()
    return inside


def read_template(text: str) -> list[Section]:
    """The sections of a researcher's template; TemplateError when it has no CUSTOMIZE section."""
    sections = read_sections(text)
    if not any(s.kind == CUSTOMIZE for s in sections):
        raise TemplateError(None, "grpo_template.py has no '# === CUSTOMIZE ===' line: mark each part the "
                                  "generated train.py must fill with that line, as the brief describes")
    return sections


def outside_lines(text: str, sections: list[Section]) -> list[tuple[int, str]]:
    """(line number, line without trailing space) of the non-blank lines outside every section and marker."""
    inside: set[int] = set()
    for section in sections:
        inside.update(range(section.start_line, section.end_line + 1))
    ends = {number for number, line in enumerate(split_lines(text), start=1) if marker_kind(line) == END}
    return [(number, line.rstrip()) for number, line in enumerate(split_lines(text), start=1)
            if number not in inside and number not in ends and line.strip()]


def generic_text(sections: list[Section]) -> str:
    return "".join(s.text for s in sections if s.kind == GENERIC)


def holes(sections: list[Section]) -> list[Section]:
    """The CUSTOMIZE sections, in order: CUSTOMIZE k is holes(...)[k - 1]."""
    return [s for s in sections if s.kind == CUSTOMIZE]


def describe_holes(template_text: str) -> str:
    """One line per CUSTOMIZE section of a template, as an answer must name them."""
    lines = []
    for number, hole in enumerate(holes(read_template(template_text)), start=1):
        indent = len(hole.marker) - len(hole.marker.lstrip())
        first = next((line.strip() for line in split_lines(hole.text) if line.strip()), "")
        where = f"grpo_template.py line {hole.start_line}" + (f", indented {indent} spaces" if indent else "")
        begins = f"; it begins `{first[:100]}`" if first else ""
        lines.append(f"CUSTOMIZE {number}: {hole.marker.strip()}   ({where}{begins})")
    return "\n".join(lines)


def fill_holes(template_text: str, bodies: list[str]) -> str:
    """The template with the k-th CUSTOMIZE section's lines replaced by bodies[k]; every other line (GENERIC
    sections, marker lines, end markers, text outside the sections) is the template's, byte for byte.

    A body keeps the template's blank lines before the next marker in place of its own trailing ones, and
    a body written less indented than its marker (a hole inside a class) is shifted right to it as a whole.
    """
    spots = holes(read_template(template_text))
    if len(bodies) != len(spots):
        raise ValueError(f"the template has {len(spots)} CUSTOMIZE sections, {len(bodies)} bodies were given")
    lines = split_lines(template_text)
    for hole, body in reversed(list(zip(spots, bodies))):
        fitted = _fitted(body, hole)
        lines[hole.start_line: hole.end_line] = [fitted.replace("\n", "\r\n") if "\r\n" in template_text else fitted]
    return "".join(lines)


def _fitted(body: str, hole: Section) -> str:
    code = [line if line.endswith("\n") else line + "\n"
            for line in _without_blank_tail(split_lines(body.replace("\r\n", "\n")))]
    want = len(hole.marker) - len(hole.marker.lstrip())
    have = min((len(line) - len(line.lstrip()) for line in code if line.strip()), default=want)
    if have < want:
        code = [" " * (want - have) + line if line.strip() else line for line in code]
    template_lines = split_lines(hole.text.replace("\r\n", "\n"))
    blank_tail = len(template_lines) - len(_without_blank_tail(template_lines))
    return "".join(code + template_lines[len(template_lines) - blank_tail:])


def _without_blank_tail(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def split_lines(text: str) -> list[str]:
    """Lines with their newlines, split on "\\n" only so numbers match editors and tracebacks."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
