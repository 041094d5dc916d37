"""Lines that differ only in form: what an edit did not need to change.

A model that sends a whole file back often reformats it: quotes normalised, spaces around operators, trailing
whitespace. Two Python lines mean the same when they hold the same tokens at the same indentation, string
literals compared by their value and comments with their spaces collapsed; a line that does not tokenize
on its own (inside a multi-line string) means the same only up to trailing whitespace. Other files' lines
compare up to trailing whitespace.

`minimised(old, new)` keeps the old text of every line the new text changed only in form, so an edit touches
the lines that differ in meaning and nothing else.
"""

from __future__ import annotations

import ast
import io
import tokenize
from difflib import SequenceMatcher

_SKIPPED = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def line_key(line: str, python: bool = True) -> tuple:
    """What a line means, as a comparable value (see the module docstring)."""
    stripped = line.rstrip()
    if not python or not stripped.strip():
        return ("text", stripped)
    indent = stripped[: len(stripped) - len(stripped.lstrip())]
    tokens = _tokens(stripped.lstrip())
    return ("python", indent, tokens) if tokens is not None else ("text", stripped)


def same_meaning(a: str, b: str, python: bool = True) -> bool:
    return line_key(a, python) == line_key(b, python)


def minimised(old: list[str], new: list[str], python: bool = True) -> list[str]:
    """`new`, with each line that matches a line of `old` in meaning (in order) given back as `old` wrote it."""
    matcher = SequenceMatcher(None, [line_key(line, python) for line in old],
                              [line_key(line, python) for line in new], autojunk=False)
    result: list[str] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        result += old[i1:i2] if op == "equal" else new[j1:j2]
    return result


def _tokens(code: str) -> tuple | None:
    """The line's tokens (strings by value, comments with collapsed spaces); None when it is not a line of code
    on its own (an unterminated string: the inside of a multi-line one)."""
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in _SKIPPED:
                continue
            if token.type == tokenize.ERRORTOKEN and token.string.strip():
                return None
            if token.type == tokenize.STRING:
                found.append(("str", _string_value(token.string)))
            elif token.type == tokenize.COMMENT:
                found.append(("#", " ".join(token.string[1:].split())))
            elif token.string.strip():
                found.append(("op", token.string))
    except tokenize.TokenError as error:
        if "multi-line statement" not in str(error.args[0]):  # an open bracket continues on the next line: fine
            return None
    except (IndentationError, SyntaxError):
        return None
    return tuple(found)


def _string_value(literal: str) -> object:
    """A string literal's value; an f-string (no value without running it) by its prefix and its inside."""
    try:
        return ("value", ast.literal_eval(literal))
    except (ValueError, SyntaxError):
        prefix = literal[: len(literal) - len(literal.lstrip("rRbBuUfF"))].lower()
        body = literal[len(prefix):]
        quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
        return ("literal", prefix, body[len(quote): len(body) - len(quote)])
