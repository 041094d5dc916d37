"""Parse an LLM's file answers and apply its SEARCH/REPLACE edits, on strings only.

Three answer formats are used, available verbatim as ``WHOLE_FILE_FORMAT``,
``SECTIONS_FORMAT`` and ``EDIT_FORMAT`` so prompts and error messages quote
the same text. A generation answer's format problems are reported all at once.

Whole file (generation), parsed by ``parse_files``::

    FILE: generated/helpers.py
    ```python
    ...the entire file...
    ```

- One block per file; an answer may hold several.
- The ``FILE:`` line comes right before the opening fence (blank lines between
  are allowed). Paths are relative, e.g. ``helpers.py`` or
  ``generated/helpers.py``.
- The fence is three or more backticks with any (or no) language. It is closed
  by a line of only backticks, at least as many as the opening fence, so a file
  that itself contains ``` lines (markdown) must be sent in a ```` fence.
- Prose outside the blocks is ignored; a fence without a ``FILE:`` line is an
  error.

Sections (train.py from the template), parsed by ``parse_sections``::

    CUSTOMIZE 2: # === CUSTOMIZE ===
    ```python
    ...the code of the template's 2nd CUSTOMIZE section...
    ```

- One block per CUSTOMIZE section of the template, named by its number in
  template order and its marker line; fences as for whole files.
- The code is spliced between that marker line and the next marker line of
  the template (``orchestrator.sources.template.fill_holes``): GENERIC sections and
  marker lines are the template's by construction. A repeated marker line at
  the start of the code and an end marker at its end are dropped; any other
  marker line in the code is an error, and so is a section left out, sent
  twice, numbered past the last one or named by another marker line.

Edit (fix), parsed by ``parse_edits``::

    FILE: train.py
    <<<<<<< SEARCH
    exact lines to find
    =======
    replacement lines
    >>>>>>> REPLACE

- A ``FILE:`` line sets the path for every block after it, until the next
  ``FILE:`` line; an answer may edit several files with several blocks each.
- Blocks may be wrapped in a code fence; fence lines outside blocks are ignored.
- An empty SEARCH section creates a missing (or empty) file with the REPLACE
  text; on a file with content it is refused by ``apply_edits``: that would be a
  regeneration, which the brief does not allow during debugging.

Applying an edit (``apply_edit``) looks for the SEARCH lines as whole lines of
the file, trying in order, and stopping at the first rule that matches at all:

1. the exact lines;
2. the lines ignoring trailing whitespace;
3. the lines shifted by one uniform leading-whitespace offset (the REPLACE
   lines are then re-indented by the same offset);
4. rules 1-3 again with stray blank lines dropped from the start and/or end
   of the SEARCH (and as many from the same end of the REPLACE).

A rule that matches more than one place makes the edit ambiguous: it is not
applied. Line endings are normalised to ``\\n`` for matching; a file written
with ``\\r\\n`` keeps them, and a file's final newline (or its absence) is kept.

``apply_edits`` is all-or-nothing: every block is dry-run against the
progressively edited texts, and nothing is to be written unless all match.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import NoReturn

from orchestrator.llm.diffs import looks_like_diff, parse_unified
from orchestrator.llm.meaning import line_key, minimised
from orchestrator.sources.template import (END, Section, describe_holes, fill_holes, holes, marker_kind, read_sections,
                                   read_template, string_lines)

WHOLE_FILE_FORMAT = """\
FILE: path/to/file.py
```python
<the entire content of the file>
```

Send one such block per file. The FILE: line comes right before the opening \
fence. If the file itself contains ``` lines, open and close its block with \
four backticks (````) instead of three."""

SECTIONS_FORMAT = """\
CUSTOMIZE 1: <the marker line of the template's 1st CUSTOMIZE section>
```python
<the code that fills it: what goes between that marker line and the next marker line, \
at its indentation in train.py>
```

Send one such block per CUSTOMIZE section, numbered in template order, and \
nothing of the GENERIC sections: train.py is built from the template, with \
every GENERIC section and marker line copied as they are. If the code itself \
contains ``` lines, open and close its block with four backticks (````)."""

EDIT_FORMAT = """\
FILE: path/to/file.py
<<<<<<< SEARCH
<lines copied exactly from the current file>
=======
<the lines to put in their place>
>>>>>>> REPLACE

A FILE: line applies to every block after it until the next FILE: line. The \
SEARCH section must match exactly one place in the file, character for \
character, including indentation and comments; include a few unchanged lines \
around the change to make it unique. An empty SEARCH section only creates a \
file that does not exist yet; never send a whole existing file again."""

_FILE_LINE = re.compile(r"^[\s#*]*FILE:[\s*]*(.*?)\s*$")
_SECTION_LINE = re.compile(r"^[\s#*]*(CUSTOMIZE\s+\d+\b.*?)[\s*]*$")
_SECTION_NAME = re.compile(r"CUSTOMIZE\s+(\d+)[\s*]*(?::\s*(.*))?")
_FENCE_OPEN = re.compile(r"^\s*(`{3,})[^`]*$")
_FENCE_CLOSE = re.compile(r"^\s*(`{3,})\s*$")
_SEARCH = re.compile(r"^<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^={5,9}$")
_REPLACE = re.compile(r"^>{5,9}\s*REPLACE\s*$")
_PLACEHOLDER = re.compile(r"^\s*\.\.\.\s+#\s*(\d+) lines? not shown\s*$")  # orchestrator.llm.fitting's


class EditFormatError(ValueError):
    """The answer does not follow the format; the message is written for the model."""


@dataclass(frozen=True)
class FileBlock:
    path: str
    content: str


@dataclass(frozen=True)
class Edit:
    path: str
    search: str
    replace: str
    line: int | None = None  # where a diff hunk says it starts (1-based, in the file before the answer's edits)
    context: tuple[int, int] = (0, 0)  # a hunk's context lines, before and after its change, that fuzz may drop


@dataclass
class EditResult:
    """Outcome of ``apply_edits``.

    ``applied`` lists the blocks that matched in the dry run; they are only to
    be written when ``failed`` is empty, in which case ``new_contents`` holds
    the final text of every touched file and ``error`` is None. Otherwise
    ``new_contents`` is empty and ``error`` is the message for the model.
    """

    new_contents: dict[str, str]
    applied: list[Edit]
    failed: list[Edit]
    error: str | None


# --------------------------------------------------------------------------
# Parsing


def parse_files(text: str) -> list[FileBlock]:
    """Return the whole-file blocks of an answer, in order; EditFormatError naming every problem at once."""
    blocks, problems = read_files(text)
    _refuse_if_unusable(problems, not blocks, "No file was found in the answer.", WHOLE_FILE_FORMAT)
    return blocks


def read_files(text: str, strays: list[str] | None = None) -> tuple[list[FileBlock], list[str]]:
    """The whole-file blocks an answer holds, and its format problems ("Line N: ..."), all of them; with `strays`,
    a code fence with no `FILE:` line (a sketch in the answer's prose) goes there instead of the problems."""
    blocks: list[FileBlock] = []
    labelled, problems = _labelled_blocks(text, _FILE_LINE, "`FILE: path`", strays)
    for raw, lineno, content in labelled:
        try:
            path = _clean_path(raw, lineno, WHOLE_FILE_FORMAT)
        except EditFormatError as error:
            problems.append(str(error).split("\n\n", 1)[0])
            continue
        if any(block.path == path for block in blocks):
            problems.append(f"Line {lineno}: {path} is sent twice; send each file once.")
            continue
        blocks.append(FileBlock(path, content))
    return blocks, problems


def parse_sections(text: str, template_text: str) -> str:
    """train.py from an answer that fills each CUSTOMIZE section of the template (``SECTIONS_FORMAT``);
    EditFormatError naming every problem at once, with the template's list of sections."""
    spots = holes(read_template(template_text))
    bodies = _section_bodies(text, template_text, set(range(1, len(spots) + 1)))
    return fill_holes(template_text, [bodies[n] for n in range(1, len(spots) + 1)])


def parse_section(text: str, template_text: str, number: int) -> str:
    """The code of CUSTOMIZE `number` from an answer asked for that section alone (a node that splits its work)."""
    return _section_bodies(text, template_text, {number})[number]


def _section_bodies(text: str, template_text: str, wanted: set[int]) -> dict[int, str]:
    """The code of each CUSTOMIZE section in `wanted` (numbers) that the answer sends; EditFormatError naming
    every problem: a section of `wanted` missing or sent twice, one not asked for, a bad label or marker line."""
    spots = holes(read_template(template_text))
    strays: list[str] = []  # fences with no label: a sketch in the prose, a problem only when a section is missing
    labelled, problems = _labelled_blocks(text, _SECTION_LINE, "`CUSTOMIZE N: marker line`", strays)
    bodies: dict[int, tuple[int, str]] = {}  # number -> (line of its label, code)
    named: set[int] = set()  # numbers the answer gave, usable or not
    for label, lineno, content in labelled:
        name = _SECTION_NAME.fullmatch(label)
        number = int(name.group(1)) if name else 0
        if not 1 <= number <= len(spots):
            problems.append(f"Line {lineno}: `{label}` names no CUSTOMIZE section of the template; they are "
                            f"CUSTOMIZE 1 to CUSTOMIZE {len(spots)}.")
            continue
        if number not in wanted:
            problems.append(f"Line {lineno}: CUSTOMIZE {number} was not asked for in this answer; send only "
                            f"{_numbers(wanted)}.")
            continue
        hole = spots[number - 1]
        named.add(number)
        marker = (name.group(2) or "").replace("`", "").strip()
        if number in bodies:
            problems.append(f"Line {lineno}: CUSTOMIZE {number} is sent twice (lines {bodies[number][0]} and "
                            f"{lineno}); send each section once.")
        elif marker and " ".join(marker.split()[: len(hole.marker.split())]) != " ".join(hole.marker.split()):
            problems.append(f"Line {lineno}: CUSTOMIZE {number} names the marker line `{marker}`, but the "
                            f"template's CUSTOMIZE {number} (line {hole.start_line}) is `{hole.marker.strip()}`; "
                            f"number the sections in template order.")
        else:
            code, problem = _section_code(content, hole)
            if problem:
                problems.append(f"Line {lineno}: the code of CUSTOMIZE {number} {problem}")
            bodies[number] = (lineno, code)
    missing = [str(n) for n in sorted(wanted) if n not in named]
    if missing:
        problems += strays
        problems.append(f"CUSTOMIZE {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing from the "
                        f"answer; send {_numbers(wanted)}, each once.")
    if problems:
        raise format_error(problems, SECTIONS_FORMAT,
                           extra=f"The template's CUSTOMIZE sections, in order:\n{describe_holes(template_text)}")
    return {number: code for number, (_, code) in bodies.items()}


def _numbers(wanted: set[int]) -> str:
    if len(wanted) == 1:
        return f"CUSTOMIZE {min(wanted)} only"
    return "every CUSTOMIZE section of the template"


def sections_answer(train_text: str) -> str:
    """The ``SECTIONS_FORMAT`` answer that gives back this train.py's CUSTOMIZE sections (a recorded answer)."""
    blocks = []
    for number, hole in enumerate(holes(read_sections(train_text)), start=1):
        fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", hole.text)), default=0) + 1)
        blocks.append(f"CUSTOMIZE {number}: {hole.marker.strip()}\n{fence}python\n{_with_newline(hole.text)}{fence}\n")
    return "\n".join(blocks)


def _section_code(content: str, hole: Section) -> tuple[str, str | None]:
    """The code of a section as sent, less a repeated marker line at its start and an end marker at its end;
    and what is wrong with it (a marker line inside), or None."""
    lines = _normalise(content).split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if filled and lines[filled[0]].split() == hole.marker.split():
        lines[filled[0]] = ""
    if len(filled) > 1 and marker_kind(lines[filled[-1]]) == END:
        lines[filled[-1]] = ""
    code = "\n".join(lines).strip("\n") + "\n"
    quoted = string_lines(code)
    for number, line in enumerate(code.split("\n"), start=1):
        if number not in quoted and marker_kind(line) is not None:
            return code, (f"holds the marker line `{line.strip()}` (its line {number}); send only the code between "
                          f"the section's marker line and the next one: the marker lines and the GENERIC sections "
                          f"come from the template.")
    return code, None


def _refuse_if_unusable(problems: list[str], empty: bool, nothing_found: str, fmt: str) -> None:
    """EditFormatError for an answer with problems (all of them listed), or with nothing in it."""
    if problems:
        raise format_error(problems, fmt)
    if empty:
        raise EditFormatError(f"{nothing_found}\n\n{_format_reminder(fmt)}")


def format_error(problems: list[str], fmt: str, extra: str = "") -> EditFormatError:
    """One EditFormatError listing every problem of an answer, then `extra`, then the format."""
    listed = "\n".join(f"- {p}" for p in problems)
    return EditFormatError(f"{len(problems)} format error(s) in the answer:\n{listed}\n\n"
                           + (f"{extra}\n\n" if extra else "") + _format_reminder(fmt))


def _labelled_blocks(text: str, label: re.Pattern[str], what: str, strays: list[str] | None = None
                     ) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(label, line of the label, fenced content) for each label line followed by a code fence (blank lines
    between are allowed), and every problem found ("Line N: ..."); reading goes on after a problem. A fence
    with no label goes to `strays` where it is given, else to the problems."""
    lines = _normalise(text).split("\n")
    blocks: list[tuple[str, int, str]] = []
    problems: list[str] = []
    pending: tuple[str, int, str] | None = None  # the label's value, its line number, the line as written
    strayed = False  # text came between the pending label and its fence
    i = 0
    while i < len(lines):
        line, lineno = lines[i], i + 1
        labelled = label.match(line)
        fence = _FENCE_OPEN.match(line)
        if labelled:
            if pending:
                problems.append(f"Line {pending[1]}: `{pending[2]}` is not followed by a code fence.")
            pending, strayed = (labelled.group(1), lineno, line.strip()), False
        elif fence:
            ticks = len(fence.group(1))
            end = _closing_fence(lines, i + 1, ticks)
            if pending is None:
                (problems if strays is None else strays).append(
                    f"Line {lineno}: this code fence has no {what} line before it.")
            elif end is None:
                problems.append(f"Line {lineno}: the code fence opened here for {pending[0]} is never closed "
                                f"(it needs a line of {ticks} or more backticks alone).")
            else:
                blocks.append((pending[0], pending[1], _join(lines[i + 1 : end])))
            if end is None:
                return blocks, problems
            pending = None
            i = end
        elif pending and line.strip() and not strayed:
            problems.append(f"Line {pending[1]}: `{pending[2]}` must be followed directly by the code fence "
                            f"holding it, but line {lineno} is `{line.strip()}`.")
            strayed = True  # the fence after the stray text is still read as this label's block
        i += 1
    if pending:
        problems.append(f"Line {pending[1]}: `{pending[2]}` is not followed by a code fence.")
    return blocks, problems


def parse_edits(text: str) -> list[Edit]:
    """Return the SEARCH/REPLACE blocks of an answer, in order; EditFormatError naming every format error
    of the answer at once (after a broken block, reading resumes past its `>>>>>>> REPLACE`). An answer with no
    SEARCH block that holds a unified diff is read as one (orchestrator.llm.diffs): each hunk an edit."""
    lines = _normalise(text).split("\n")
    if not any(_SEARCH.match(line.strip()) for line in lines) and looks_like_diff(text):
        return _diff_edits(text)
    edits: list[Edit] = []
    problems: list[str] = []
    path: str | None = None
    i = 0
    while i < len(lines):
        line, lineno = lines[i], i + 1
        marker = line.strip()
        try:
            file_line = _FILE_LINE.match(line)
            if file_line:
                path = _clean_path(file_line.group(1), lineno, EDIT_FORMAT)
            elif _SEARCH.match(marker):
                if path is None:
                    _edits_error(lineno, "this SEARCH block has no `FILE: path` line before it.")
                edit, i = _parse_block(lines, i, path)
                edits.append(edit)
            elif _DIVIDER.match(marker) or _REPLACE.match(marker):
                _edits_error(lineno, f"`{marker}` appears outside a SEARCH/REPLACE block.")
        except EditFormatError as error:
            problems.append(str(error).split("\n\n", 1)[0])
            i = _past_block(lines, i)
        i += 1
    _refuse_if_unusable(problems, not edits, "No SEARCH/REPLACE block was found in the answer.", EDIT_FORMAT)
    return edits


def _diff_edits(text: str) -> list[Edit]:
    hunks, problems = parse_unified(text)
    edits = []
    for hunk in hunks:
        try:
            edits.append(Edit(_clean_path(hunk.path, 0, EDIT_FORMAT), hunk.search, hunk.replace, hunk.line,
                              hunk.context))
        except EditFormatError as error:
            problems.append(str(error).split("\n\n", 1)[0].replace("Line 0: ", f"{hunk.path}: "))
    _refuse_if_unusable(problems, not edits, "No hunk was found in the diff.", EDIT_FORMAT)
    return edits


def _past_block(lines: list[str], start: int) -> int:
    """The index of the `>>>>>>> REPLACE` that ends the block at `start` (before any next SEARCH)."""
    for i in range(start + 1, len(lines)):
        if _REPLACE.match(lines[i].strip()):
            return i
        if _SEARCH.match(lines[i].strip()):
            return i - 1
    return len(lines)


def _parse_block(lines: list[str], start: int, path: str) -> tuple[Edit, int]:
    """Parse the block whose SEARCH marker is ``lines[start]``; return it and its last index."""
    opened = start + 1
    i = start + 1
    search: list[str] = []
    while i < len(lines) and not _DIVIDER.match(lines[i].strip()):
        if _SEARCH.match(lines[i].strip()) or _REPLACE.match(lines[i].strip()):
            _edits_error(
                i + 1,
                f"`{lines[i].strip()}` comes before the `=======` line of the "
                f"SEARCH block opened at line {opened}.",
            )
        search.append(lines[i])
        i += 1
    if i == len(lines):
        _edits_error(opened, "this SEARCH block has no `=======` line.")
    i += 1
    replace: list[str] = []
    # A `=======` line here is replacement text: a mistaken divider leaves the
    # block without `>>>>>>> REPLACE`, which is reported anyway.
    while i < len(lines) and not _REPLACE.match(lines[i].strip()):
        if _SEARCH.match(lines[i].strip()):
            _edits_error(
                i + 1,
                f"a new SEARCH block starts before the block opened at line "
                f"{opened} was closed with `>>>>>>> REPLACE`.",
            )
        replace.append(lines[i])
        i += 1
    if i == len(lines):
        _edits_error(opened, "this SEARCH block is never closed with `>>>>>>> REPLACE`.")
    return Edit(path, _join(search), _join(replace)), i


def _closing_fence(lines: list[str], start: int, ticks: int) -> int | None:
    for i in range(start, len(lines)):
        close = _FENCE_CLOSE.match(lines[i])
        if close and len(close.group(1)) >= ticks:
            return i
    return None


def _clean_path(raw: str, lineno: int, fmt: str) -> str:
    path = raw.strip().strip("`*'\"").strip().replace("\\", "/")
    problem = None
    if not path:
        problem = "this FILE: line has no path."
    elif path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        problem = f"`{path}` is an absolute path; use a relative path like helpers.py."
    elif ".." in path.split("/"):
        problem = f"`{path}` leaves the project directory; use a relative path without `..`."
    if problem:
        raise EditFormatError(f"Line {lineno}: {problem}\n\n{_format_reminder(fmt)}")
    return posixpath.normpath(path)


def _edits_error(lineno: int, problem: str) -> NoReturn:
    raise EditFormatError(f"Line {lineno}: {problem}\n\n{_format_reminder(EDIT_FORMAT)}")


def _format_reminder(fmt: str) -> str:
    return f"The answer must use this format:\n\n{fmt}"


# --------------------------------------------------------------------------
# Applying


@dataclass(frozen=True)
class _Match:
    start: int
    end: int
    replacement: list[str]
    dropped: int = 0  # leading context lines fuzz left out (the hunk starts that much earlier)


@dataclass(frozen=True)
class _Placed:
    """Where one edit went: the new text, or why not (the 1-based lines of the places that matched equally)."""

    text: str | None
    candidates: list[int]
    start: int = 0  # 0-based line of the whole hunk in the text before it (for the next hunk's expected line)
    delta: int = 0  # lines added minus lines removed


def apply_edit(content: str, edit: Edit) -> str | None:
    """Return ``content`` with the edit applied, or None if SEARCH matches no single place."""
    return _apply(content, edit).text


def _apply(content: str, edit: Edit, near: int | None = None) -> _Placed:
    """Apply one edit; a diff hunk's `near` (0-based line where it should start) chooses among places."""
    crlf = "\r\n" in content
    text = _normalise(content)
    if not edit.search.strip():
        if text and not text.endswith("\n"):
            text += "\n"
        return _Placed(_restore_newlines(text + _normalise(edit.replace), crlf), [])
    whole = _lines(text)
    part, replace = _lines(_normalise(edit.search)), _lines(_normalise(edit.replace))
    matches = _find(whole, part, replace, edit.path.endswith(".py"))
    if not matches and edit.context != (0, 0):
        matches = _fuzzed(whole, part, replace, edit)
    if len(matches) > 1 and near is not None:
        matches = _nearest(matches, near)
    if len(matches) != 1:
        return _Placed(None, [m.start + 1 for m in matches])
    match = matches[0]
    replacement = minimised(whole[match.start: match.end], match.replacement, edit.path.endswith(".py"))
    new_lines = whole[: match.start] + replacement + whole[match.end :]
    new_text = "\n".join(new_lines)
    if new_lines and text.endswith("\n"):
        new_text += "\n"
    return _Placed(_restore_newlines(new_text, crlf), [match.start + 1], match.start - match.dropped,
                   len(replacement) - (match.end - match.start))


def _find(whole: list[str], part: list[str], replace: list[str], python: bool = False) -> list[_Match]:
    """All matches of the first rule that matches anywhere; lines the model was shown as left out
    (`...  # N lines not shown`) match any N lines."""
    if any(_PLACEHOLDER.match(line) for line in part):
        return _with_gaps(whole, part, replace, python)
    stripped_whole = [line.rstrip() for line in whole]
    for variant_part, variant_replace in _blank_line_variants(part, replace):
        for rule in (_exact, _ignoring_trailing_whitespace, _reindented):
            matches = rule(whole, stripped_whole, variant_part, variant_replace)
            if matches:
                return matches
    if python:  # the last resort: lines that mean the same (quotes normalised, spaces around operators)
        keys = [line_key(line) for line in whole]
        wanted = [line_key(line) for line in part]
        n = len(wanted)
        return [_Match(i, i + n, replace) for i in range(len(keys) - n + 1) if keys[i: i + n] == wanted]
    return []


def _fuzzed(whole: list[str], part: list[str], replace: list[str], edit: Edit) -> list[_Match]:
    """`patch`'s fuzz: the hunk with up to two of its context lines left out at each end."""
    lead, trail = edit.context
    for fuzz in (1, 2):
        cut_lead, cut_trail = min(fuzz, lead), min(fuzz, trail)
        if not cut_lead and not cut_trail:
            continue
        shorter = part[cut_lead: len(part) - cut_trail]
        if not any(line.strip() for line in shorter):
            continue
        found = _find(whole, shorter, replace[cut_lead: len(replace) - cut_trail], edit.path.endswith(".py"))
        if found:
            return [_Match(m.start, m.end, m.replacement, cut_lead) for m in found]
    return []


def _nearest(matches: list[_Match], near: int) -> list[_Match]:
    """The match nearest to where the hunk said it starts; all of the nearest when two are as near."""
    distance = lambda m: abs(m.start - m.dropped - near)  # noqa: E731
    best = min(distance(m) for m in matches)
    return [m for m in matches if distance(m) == best]


def _with_gaps(whole: list[str], part: list[str], replace: list[str], python: bool) -> list[_Match]:
    """Matches of a SEARCH quoted from a summarised file: each `...  # N lines not shown` line matches any N
    lines; the same line in REPLACE gives back the lines it matched (the k-th of each N in order)."""
    pattern: list[str | int] = [int(m.group(1)) if (m := _PLACEHOLDER.match(line)) else line for line in part]
    length = sum(item if isinstance(item, int) else 1 for item in pattern)
    key = (lambda line: line_key(line)) if python else (lambda line: line.rstrip())
    matches = []
    for start in range(len(whole) - length + 1):
        gaps: list[tuple[int, list[str]]] = []
        at = start
        for item in pattern:
            if isinstance(item, int):
                gaps.append((item, whole[at: at + item]))
                at += item
            elif key(whole[at]) != key(item):
                break
            else:
                at += 1
        else:
            filled = _filled(replace, gaps)
            if filled is not None:
                matches.append(_Match(start, at, filled))
    return matches


def _filled(replace: list[str], gaps: list[tuple[int, list[str]]]) -> list[str] | None:
    """REPLACE with each placeholder line replaced by the lines its SEARCH counterpart matched; None when one
    has no counterpart."""
    unused = list(gaps)
    result: list[str] = []
    for line in replace:
        placeholder = _PLACEHOLDER.match(line)
        if placeholder is None:
            result.append(line)
            continue
        count = int(placeholder.group(1))
        index = next((k for k, (n, _) in enumerate(unused) if n == count), None)
        if index is None:
            return None
        result += unused.pop(index)[1]
    return result


def _exact(whole: list[str], _: list[str], part: list[str], replace: list[str]) -> list[_Match]:
    n = len(part)
    return [
        _Match(i, i + n, replace) for i in range(len(whole) - n + 1) if whole[i : i + n] == part
    ]


def _ignoring_trailing_whitespace(
    _: list[str], stripped_whole: list[str], part: list[str], replace: list[str]
) -> list[_Match]:
    return _exact(stripped_whole, stripped_whole, [line.rstrip() for line in part], replace)


def _reindented(
    _: list[str], stripped_whole: list[str], part: list[str], replace: list[str]
) -> list[_Match]:
    if not any(line.strip() for line in part):
        return []
    nonblank = [line for line in part + replace if line.strip()]
    # Remove the indentation common to SEARCH and REPLACE so that their
    # relative indentation survives; the file's own offset is added back.
    cut = min(len(line) - len(line.lstrip()) for line in nonblank)
    part = [line[cut:].rstrip() if line.strip() else "" for line in part]
    replace = [line[cut:] if line.strip() else "" for line in replace]
    n = len(part)
    matches = []
    for i in range(len(stripped_whole) - n + 1):
        prefix = _uniform_prefix(stripped_whole[i : i + n], part)
        if prefix is not None:
            matches.append(_Match(i, i + n, [prefix + line if line else line for line in replace]))
    return matches


def _uniform_prefix(chunk: list[str], part: list[str]) -> str | None:
    """The whitespace that prefixes every non-blank line of ``part`` to give ``chunk``."""
    prefixes = set()
    for have, want in zip(chunk, part):
        if not want:
            if have:
                return None
            continue
        prefix = have[: len(have) - len(want)]
        if not have.endswith(want) or prefix.strip():
            return None
        prefixes.add(prefix)
    return prefixes.pop() if len(prefixes) == 1 else None


def _blank_line_variants(
    part: list[str], replace: list[str]
) -> Iterator[tuple[list[str], list[str]]]:
    yield part, replace
    lead = _count_blank(part)
    trail = _count_blank(reversed(part))
    seen = set()
    for drop_lead, drop_trail in ((lead, 0), (0, trail), (lead, trail)):
        if (drop_lead or drop_trail) and drop_lead + drop_trail < len(part):
            if (drop_lead, drop_trail) not in seen:
                seen.add((drop_lead, drop_trail))
                # The model usually copied the stray blank line into REPLACE
                # too; keeping it there would add a line the file never had.
                replace_lead = min(drop_lead, _count_blank(replace))
                replace_trail = min(drop_trail, _count_blank(reversed(replace[replace_lead:])))
                yield (
                    part[drop_lead : len(part) - drop_trail],
                    replace[replace_lead : len(replace) - replace_trail],
                )


def _count_blank(lines: Iterable[str]) -> int:
    count = 0
    for line in lines:
        if line.strip():
            break
        count += 1
    return count


def find_similar_lines(
    search: str, content: str, context: int = 3, min_ratio: float = 0.6
) -> str:
    """The chunk of ``content`` most like ``search``, with ``context`` lines around it.

    Windows of the same line count as ``search`` are ranked by SequenceMatcher
    ratio, ignoring indentation. Returns "" when nothing reaches ``min_ratio``,
    so that unrelated code is not offered as a near miss.
    """
    search_lines = _lines(_normalise(search))
    content_lines = _lines(_normalise(content))
    if not search_lines or not content_lines:
        return ""
    n = min(len(search_lines), len(content_lines))
    matcher = SequenceMatcher(None, autojunk=False)
    matcher.set_seq2("\n".join(line.strip() for line in search_lines))
    stripped = [line.strip() for line in content_lines]
    best_ratio, best_start = 0.0, -1
    for i in range(len(content_lines) - n + 1):
        matcher.set_seq1("\n".join(stripped[i : i + n]))
        # Cheap upper bounds first: ratio() is the expensive part.
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best_ratio, best_start = ratio, i
    if best_start < 0 or best_ratio < min_ratio:
        return ""
    start = max(0, best_start - context)
    return _join(content_lines[start : best_start + n + context])


def apply_edits(edits: list[Edit], contents: dict[str, str | None]) -> EditResult:
    """Dry-run every edit in order; keep the result only if all of them apply.

    ``contents`` maps each path to its current text, or None (or no entry) when
    the file does not exist. Later blocks see the effect of earlier ones.
    """
    current: dict[str, str] = {}
    applied: list[Edit] = []
    failed: list[Edit] = []
    problems: list[str] = []
    matched: list[str] = []  # "N (path)" for the report, numbered as in the answer
    shift: dict[str, int] = {}  # a file's lines moved by its earlier hunks (and their drift), as patch counts
    for number, edit in enumerate(edits, 1):
        text = current.get(edit.path, contents.get(edit.path))
        match_lines: list[int] = []
        near: int | None = None
        if not edit.search.strip() and text is not None and text.strip():
            failed.append(edit)
            problems.append(_regeneration_message(edit, text))
            continue
        invented = _invented_placeholders(edit)
        if invented:
            failed.append(edit)
            problems.append(f"## PlaceholderInReplace: the REPLACE section for {edit.path} holds `{invented}`, a line "
                            f"of the summarised view you were shown, not of the file, and its SEARCH section does not "
                            f"hold it\n{_render(edit)}\nQuote the real lines, or leave them out of both sections.\n")
            continue
        if text is None:
            new = _normalise(edit.replace) if not edit.search.strip() else None
        else:
            near = edit.line - 1 + shift.get(edit.path, 0) if edit.line else None
            placed = _apply(text, edit, near)
            new, match_lines = placed.text, placed.candidates
            if new is not None and near is not None:
                shift[edit.path] = shift.get(edit.path, 0) + (placed.start - near) + placed.delta
        if new is not None:
            current[edit.path] = new
            applied.append(edit)
            matched.append(f"{number} ({edit.path})")
            continue
        failed.append(edit)
        if text is None:
            problems.append(_missing_file_message(edit))
        elif match_lines:
            problems.append(_ambiguous_message(edit, match_lines, near))
        else:
            problems.append(_no_match_message(edit, text))
    if failed:
        return EditResult({}, applied, failed, _failure_report(len(edits), problems, matched))
    return EditResult(current, applied, [], None)


def _invented_placeholders(edit: Edit) -> str:
    """A `...  # N lines not shown` line of REPLACE that SEARCH does not hold as often, or ""."""
    found = [line.strip() for line in _lines(_normalise(edit.search)) if _PLACEHOLDER.match(line)]
    for line in _lines(_normalise(edit.replace)):
        if _PLACEHOLDER.match(line):
            if line.strip() not in found:
                return line.strip()
            found.remove(line.strip())
    return ""


def _no_match_message(edit: Edit, content: str) -> str:
    message = (
        f"## SearchReplaceNoExactMatch: this SEARCH block failed to exactly match "
        f"lines in {edit.path}\n{_render(edit)}\n"
    )
    similar = find_similar_lines(edit.search, content)
    if similar:
        message += (
            f"Did you mean to match these actual lines from {edit.path}?\n\n{_fenced(similar)}\n"
        )
    else:
        message += f"{edit.path} has no lines similar to this SEARCH section.\n"
    return message + (
        "The SEARCH section must exactly match existing lines, "
        "including all whitespace, comments and docstrings.\n"
    )


def _ambiguous_message(edit: Edit, match_lines: list[int], near: int | None = None) -> str:
    where = ", ".join(str(line) for line in match_lines)
    if near is not None:  # a diff hunk: its lines fit several places equally near the line it gave
        return (f"## HunkAmbiguous: the hunk of {edit.path} at line {edit.line} matches {len(match_lines)} places "
                f"equally near line {near + 1} (starting at lines {where})\n{_render(edit)}\n"
                "Give more unchanged context lines in the hunk, or its right line number, so that it fits one place.\n")
    return (
        f"## SearchReplaceAmbiguousMatch: this SEARCH block matches {len(match_lines)} "
        f"places in {edit.path} (starting at lines {where})\n{_render(edit)}\n"
        "Add unchanged lines around the change to both the SEARCH and the REPLACE "
        "sections so that the SEARCH section matches exactly one place.\n"
    )


def _regeneration_message(edit: Edit, content: str) -> str:
    return (f"The SEARCH block for {edit.path} is empty, but {edit.path} already has "
            f"{len(content.splitlines())} lines: an empty SEARCH appends, and sending the whole file again would "
            f"regenerate it, which is not allowed. Quote in SEARCH the exact lines to change and send only those.")


def _missing_file_message(edit: Edit) -> str:
    return (
        f"## SearchReplaceMissingFile: {edit.path} does not exist\n{_render(edit)}\n"
        "Check the path; to create a new file, leave the SEARCH section empty.\n"
    )


def _failure_report(total: int, problems: list[str], matched: list[str]) -> str:
    summary = f"{len(problems)} of {total} SEARCH/REPLACE blocks failed.\n\n"
    note = "No block was applied; send all blocks again with the failing SEARCH sections corrected."
    if matched:
        note += f" Blocks that matched: {', '.join(matched)}."
    return summary + "\n".join(problems) + "\n" + note


def _render(edit: Edit) -> str:
    return (
        f"FILE: {edit.path}\n<<<<<<< SEARCH\n{_with_newline(edit.search)}"
        f"=======\n{_with_newline(edit.replace)}>>>>>>> REPLACE\n"
    )


def _fenced(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}{fence}\n"


# --------------------------------------------------------------------------
# Protection


def check_protected(paths: Iterable[str], protected: Iterable[str]) -> list[str]:
    """The paths (as given, in order, once each) that name a protected file.

    Paths are compared by the basename of their normalised form, so
    ``env_move.py``, ``./generated/env_move.py`` and ``generated\\env_move.py``
    all hit a protected ``env_move.py``: a relative path's root is not known
    here, and refusing too much is the safe side. Case is ignored for the same
    reason (case-insensitive file systems).
    """
    names = {_basename(path) for path in protected}
    hits: list[str] = []
    for path in paths:
        if _basename(path) in names and path not in hits:
            hits.append(path)
    return hits


def _basename(path: str) -> str:
    return posixpath.basename(posixpath.normpath(path.strip().replace("\\", "/"))).casefold()


# --------------------------------------------------------------------------
# Text helpers


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n")


def _restore_newlines(text: str, crlf: bool) -> str:
    return text.replace("\n", "\r\n") if crlf else text


def _lines(text: str) -> list[str]:
    """Split into lines; a final newline ends the last line rather than adding one."""
    if not text:
        return []
    return text.removesuffix("\n").split("\n")


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
