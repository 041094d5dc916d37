"""Smaller forms of a prompt, for a server whose context cannot take the whole one.

A prompt is a user message and the file blocks before it (`prompts.file_blocks`). Its smaller forms, each
smaller than the one before, leave out what the node needs least:

1. a template's (or train.py's) GENERIC sections summarised: the signatures of what they define, their
   imports, the first line of each docstring, and the lines that touch a name the CUSTOMIZE sections define
   or another file of the prompt defines (a config field, a helper); the CUSTOMIZE sections stay whole;
2. the GENERIC sections as signatures only;
3. the blocks the node does not need dropped (what the node names droppable);
4. the other Python files outlined: imports, module constants, class and function signatures with their
   docstrings; bodies left out (never a file the answer edits: the node names those whole);
5. the GENERIC sections left out, each one `...` line (their code is the template's: never to be written);
6. the node's own smaller user messages (a fix's evidence abridged), last.

A left-out run of lines is one `...  # N lines not shown` line at its indentation, and the block's header
says what was summarised, so the model never quotes what it was not shown.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from orchestrator.llm.base import Message
from orchestrator.sources.template import GENERIC, TemplateError, read_sections, split_lines

TOUCHING, SIGNATURES, NOTHING = "touching", "signatures", "nothing"  # what a GENERIC summary keeps
BLOCK_HEADER = re.compile(r"^=== FILE: (?P<name>.+?) ===\n")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Form:
    """One form of a prompt: its messages, its file blocks, and what it leaves out ("" for the whole prompt)."""

    messages: list[Message]
    cache_prefix: list[str]
    note: str = ""


@dataclass(frozen=True)
class _Block:
    name: str | None  # the label the node gave it (None: a text that is not a file block)
    text: str
    shortened: str = ""  # how this form shortened it, said in its header

    @property
    def file(self) -> str:
        """The file name, without what the node added to the label ("env_move.py (read-only: never edit)")."""
        return (self.name or "").split(" (", 1)[0]

    def render(self) -> str:
        if self.name is None:
            return self.text
        said = f" ({self.shortened}; `...` marks lines not shown)" if self.shortened else ""
        return f"=== FILE: {self.name}{said} ===\n{self.text}"


def forms(messages: list[Message], cache_prefix: Sequence[str], *, whole: Iterable[str] = (),
          droppable: Iterable[str] = (), smaller_messages: Sequence[tuple[list[Message], str]] = ()) -> list[Form]:
    """The prompt, then its smaller forms in order (see the module docstring); a form no smaller than the one
    before is left out. `whole`: file names never outlined (the answer edits them; their GENERIC sections may still be
    summarised); `droppable`: file names the node can do without; `smaller_messages`: (messages, note) the node
    can ask with instead, smallest last."""
    blocks = [_read_block(text) for text in cache_prefix]
    whole, droppable = set(whole), set(droppable)
    result = [Form(list(messages), list(cache_prefix))]
    notes: dict[str, str] = {}  # what each kind of shortening did, in order

    def add(changed: list[_Block], kind: str, note: str) -> None:
        """`changed` as the next form, when it is smaller than the last one (a summary of a short file is not)."""
        nonlocal blocks
        rendered = [block.render() for block in changed]
        if sum(map(len, rendered)) < sum(map(len, result[-1].cache_prefix)):
            notes[kind] = note
            result.append(Form(list(result[-1].messages), rendered, "; ".join(notes.values())))
            blocks = changed

    names = {block.file: defined_names(block.text) for block in blocks if block.name}
    original = {block.file: block.text for block in blocks if block.name}

    def summarised(keep: str, with_others: bool) -> list[_Block]:
        """The blocks so far, each template-like file's GENERIC sections summarised afresh from its own text."""
        shortened = []
        for block in blocks:
            others = set().union(*(v for k, v in names.items() if k != block.file)) if with_others else set()
            summary = summarise_generic(original[block.file], others, keep=keep) if block.name else None
            said = "GENERIC sections left out" if keep == NOTHING else "GENERIC sections summarised"
            shortened.append(_Block(block.name, summary, said) if summary else block)
        return shortened

    levels = (("signatures and the lines that touch the holes' and the other files' names", TOUCHING, True),
              ("signatures and the lines that touch the holes' names", TOUCHING, False),
              ("their signatures", SIGNATURES, False))
    for said, keep, with_others in levels:
        add(summarised(keep, with_others), "generic", f"GENERIC sections summarised to {said}")
    left_out = sorted({b.file for b in blocks if b.name and b.file in droppable})
    add([b for b in blocks if not (b.name and b.file in droppable)], "dropped", f"left out: {', '.join(left_out)}")
    outlined = []
    for block in blocks:
        short = outline(block.text) if (block.name and not block.shortened and block.file not in whole
                                        and block.file.endswith(".py")) else None
        outlined.append(_Block(block.name, short, "outline: signatures and docstrings")
                        if short and len(short) < len(block.text) else block)
    add(outlined, "outlined", "other Python files outlined to their signatures and docstrings")
    add(summarised(NOTHING, False), "generic", "GENERIC sections left out (the template's code, never edited)")
    for smaller, note in smaller_messages:
        notes["messages"] = note
        result.append(Form(list(smaller), list(result[-1].cache_prefix), "; ".join(notes.values())))
    return result


def summarise_generic(text: str, names: set[str], *, keep: str = TOUCHING) -> str | None:
    """`text` (a template or train.py) with each GENERIC section summarised: its signatures, imports and first
    docstring lines, and (`keep` TOUCHING) the lines that touch the holes' names and `names`; with `keep`
    NOTHING, each GENERIC section is one `...` line. None when the text has no GENERIC section, or does not
    parse as Python."""
    try:
        sections = read_sections(text)
        tree = ast.parse(text)
    except (TemplateError, SyntaxError, ValueError):
        return None
    generic = [s for s in sections if s.kind == GENERIC]
    if not generic:
        return None
    from_holes = set().union(*(defined_names(s.text) for s in sections if s.kind != GENERIC), set())
    structure = _structure_lines(tree) if keep != NOTHING else set()
    wanted = from_holes | names
    lines = split_lines(text)
    shown: set[int] = set()  # 1-based line numbers of GENERIC lines kept
    for section in generic:
        for number in range(section.start_line + 1, section.end_line + 1):
            line = lines[number - 1]
            if number in structure or (keep == TOUCHING and wanted & set(_IDENTIFIER.findall(_code_part(line)))):
                shown.add(number)
    inside = {n for s in generic for n in range(s.start_line + 1, s.end_line + 1)}
    return _with_gaps(lines, lambda n: n not in inside or n in shown)


def outline(text: str) -> str | None:
    """A Python file as its imports, module constants, class and function signatures and docstrings; None
    when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    keep: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)):
            keep.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]:
            keep.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.update(_signature(node))
            doc = _docstring_node(node)
            if doc is not None:
                keep.update(range(doc.lineno, (doc.end_lineno or doc.lineno) + 1))
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.Assign, ast.AnnAssign)):
                        keep.update(range(item.lineno, (item.end_lineno or item.lineno) + 1))
    return _with_gaps(split_lines(text), lambda n: n in keep)


def defined_names(text: str) -> set[str]:
    """The names a Python text defines: functions, classes, and what module and class bodies assign (a config's
    fields); none when it does not parse."""
    try:
        tree = ast.parse(_dedented(text))
    except (SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
    for body in bodies:
        for node in body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            found.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in found if len(name) > 2}


def _structure_lines(tree: ast.Module) -> set[int]:
    """Lines kept in every summary: imports, signatures (decorators to the colon), first docstring lines."""
    keep: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.update(_signature(node))
            doc = _docstring_node(node)
            if doc is not None:
                keep.add(doc.lineno)
    return keep


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> range:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    body_start = node.body[0].lineno if node.body else node.lineno + 1
    return range(first, max(node.lineno, body_start - 1) + 1)


def _docstring_node(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None) or []
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def _with_gaps(lines: list[str], shown) -> str:
    """The lines `shown(number)` keeps, each run of others as one `...  # N lines not shown` line."""
    out: list[str] = []
    gap: list[str] = []

    def close_gap() -> None:
        if not gap:
            return
        if all(not line.strip() for line in gap):
            out.extend(gap)
        else:
            first = next(line for line in gap if line.strip())
            indent = first[: len(first) - len(first.lstrip())]
            out.append(f"{indent}...  # {len(gap)} line{'s' if len(gap) > 1 else ''} not shown\n")
        gap.clear()

    for number, line in enumerate(lines, start=1):
        if shown(number):
            close_gap()
            out.append(line)
        else:
            gap.append(line)
    close_gap()
    return "".join(out)


def _code_part(line: str) -> str:
    """The line without its comment (roughly: a `#` outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:i]
    return line


def _dedented(text: str) -> str:
    lines = split_lines(text)
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "".join(line[indent:] if line.strip() else line for line in lines)


def _read_block(text: str) -> _Block:
    header = BLOCK_HEADER.match(text)
    return _Block(header["name"], text[header.end():]) if header else _Block(None, text)
