"""The pipeline as a picture: LangGraph's own graph of the run, laid out and drawn by Graphviz.

The graph's nodes and edges come from the compiled StateGraph (`get_graph()`), so the picture is the
wiring the run really has; Graphviz's `dot` (Debian's `graphviz` package) lays it out and writes SVG,
which the page inlines. Mermaid, LangGraph's other drawing, needs mermaid.js (3 MB of JavaScript
inlined into every page, or a network fetch) or a web service for a PNG; `dot` is a 30 ms subprocess
and its SVG weighs about 20 kB.

The runner keeps the graph's shape in `runs/RUN_ID/pipeline.json`, so `report` draws the run's own graph
without importing LangGraph. The drawing is the same for every page of a run, so it is made once per process
and shape. Where the run
stands is not drawn into it: every node and edge carries an id (`node-NAME`, `edge-SRC-DST`), and the page
colours the current node and the path taken with CSS. Without `dot` the page says how to get it.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.base.files import write_atomic

DOT_TIMEOUT_S = 20.0
PIPELINE_FILE = "pipeline.json"
START, END = "__start__", "__end__"


@dataclass(frozen=True)
class Pipeline:
    nodes: tuple[str, ...]  # in the graph's order, START and END included
    edges: tuple[tuple[str, str, bool], ...]  # (source, target, conditional)

    @classmethod
    def of(cls, drawable: Any) -> "Pipeline":
        """From LangGraph's drawable graph (`compiled.get_graph()`)."""
        return cls(tuple(drawable.nodes), tuple((e.source, e.target, bool(e.conditional)) for e in drawable.edges))

    def save(self, run_dir: Path) -> None:
        """`run_dir/pipeline.json`: the run's own graph, for `report` (which then needs no LangGraph import)."""
        write_atomic(Path(run_dir) / PIPELINE_FILE, json.dumps({"nodes": self.nodes, "edges": self.edges}))

    @classmethod
    def load(cls, run_dir: Path) -> "Pipeline | None":
        try:
            data = json.loads((Path(run_dir) / PIPELINE_FILE).read_text())
            return cls(tuple(data["nodes"]), tuple((s, t, bool(c)) for s, t, c in data["edges"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def to_dot(self) -> str:
        # edges into the last node before END (a stopped run's way out, from every step) do not shape the layout,
        # and edges sharing an end are drawn merged (`concentrate`): a pair A->B, B->A becomes one two-headed line
        sink = next((s for s, t, _ in self.edges if t == END), None)
        lines = ["digraph pipeline {",
                 "  rankdir=TB; nodesep=0.25; ranksep=0.22; concentrate=true; bgcolor=transparent;",
                 '  node [shape=box, style="rounded,filled", fillcolor="#f3f4f6", color="#9ca3af", '
                 'fontname="Helvetica", fontsize=11, height=0.3];',
                 '  edge [color="#9ca3af", arrowsize=0.6];']
        for node in self.nodes:
            terminal = ', shape=circle, label="", width=0.15, fillcolor="#6b7280"' if node in (START, END) else ""
            lines.append(f'  "{node}" [id="node-{node}"{terminal}];')
        for source, target, conditional in self.edges:
            style = "dashed" if conditional else "solid"
            aside = ', constraint=false, color="#d1d5db"' if target == sink and conditional else ""
            lines.append(f'  "{source}" -> "{target}" [id="edge-{source}-{target}", style={style}{aside}];')
        lines.append("}")
        return "\n".join(lines)


@functools.lru_cache(maxsize=4)
def _render(dot_source: str) -> str:
    done = subprocess.run(["dot", "-Tsvg"], input=dot_source, capture_output=True, text=True, timeout=DOT_TIMEOUT_S,
                          check=True)
    svg = done.stdout
    return svg[svg.find("<svg"):]  # no XML prolog or DOCTYPE inside HTML


def pipeline_svg(pipeline: Pipeline) -> tuple[str, str]:
    """(SVG markup, '') or ('', why there is no drawing)."""
    if shutil.which("dot") is None:
        return "", "the pipeline drawing needs Graphviz's dot: apt-get install graphviz (or your system's package)"
    try:
        return _render(pipeline.to_dot()), ""
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"Graphviz's dot could not draw the pipeline: {exc}"


def path_taken(nodes_in_order: Iterable[str], pipeline: Pipeline) -> list[str]:
    """The pipeline's nodes in the order the run went through them, repeats of one node in a row merged."""
    known = set(pipeline.nodes)
    path: list[str] = []
    for node in nodes_in_order:
        if node in known and (not path or path[-1] != node):
            path.append(node)
    return path


def highlight_css(path: Sequence[str], current: Sequence[str], pipeline: Pipeline) -> str:
    """CSS that marks the nodes and edges of `path` as visited and the `current` nodes as where the run is."""
    edges = {(s, t) for s, t, _ in pipeline.edges}
    walked = {(a, b) for a, b in zip(path, path[1:]) if (a, b) in edges}
    walked |= {(b, a) for a, b in walked if (b, a) in edges}  # one line where `concentrate` merged the pair
    rules = [f"#node-{n} > path, #node-{n} > polygon {{ fill: var(--visited); stroke: var(--visited-line); }}"
             for n in dict.fromkeys(path)]
    rules += [f"#edge-{a}-{b} > path {{ stroke: var(--visited-line); stroke-width: 2; }}"
              f" #edge-{a}-{b} > polygon {{ fill: var(--visited-line); stroke: var(--visited-line); }}"
              for a, b in sorted(walked)]
    rules += [f"#node-{n} > path, #node-{n} > polygon {{ fill: var(--current); stroke: var(--current-line); "
              f"stroke-width: 2; }}" for n in current]
    return "\n".join(rules)
