"""Protected text put back by code: an edited train.py's GENERIC sections are the template's, whatever the edit did.

The orchestrator knows the template byte for byte, so a model is never paid to retype it: when an edit of
train.py also changed GENERIC sections (a whole file sent back reformatted, a "fix" of a GENERIC line), the
edit keeps its CUSTOMIZE lines and every GENERIC section, marker line and line outside the sections is the
template's again. An edit whose sections no longer line up with the template's (a marker line removed) is left
as it is, for the rules to refuse.
"""

from __future__ import annotations

from orchestrator.sources.template import GENERIC, TemplateError, read_sections, read_template, split_lines


def restore_generic(train_text: str, template_text: str) -> tuple[str, list[str]]:
    """(train.py with the template's GENERIC sections, markers and outside text put back around its CUSTOMIZE
    code, what was put back in words); the text unchanged and [] when nothing was to put back or the sections
    do not line up."""
    try:
        edited, template = read_sections(train_text), read_template(template_text)
    except TemplateError:
        return train_text, []
    if [s.kind for s in edited] != [s.kind for s in template]:
        return train_text, []
    lines = split_lines(template_text)
    for mine, theirs in reversed(list(zip(edited, template))):
        if theirs.kind != GENERIC:
            lines[theirs.start_line: theirs.end_line] = [_ending_like(mine.text, theirs.text)]
    rebuilt = "".join(lines)
    if rebuilt == train_text:
        return train_text, []
    changed = [theirs.describe() for mine, theirs in zip(edited, template)
               if theirs.kind == GENERIC and (mine.text != theirs.text or mine.marker != theirs.marker)]
    return rebuilt, changed or ["marker lines or the text between sections"]


def _ending_like(code: str, template_body: str) -> str:
    """A CUSTOMIZE body that ends as the template's does: a newline before the next marker line."""
    return code if not code or code.endswith("\n") or not template_body.endswith("\n") else code + "\n"
