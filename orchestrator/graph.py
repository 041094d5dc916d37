"""The StateGraph: nodes, edges and routers. Nodes live in orchestrator/nodes; this file only wires them."""

from __future__ import annotations

from typing import Callable

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from orchestrator.nodes.finish import finish
from orchestrator.nodes.generate import STEPS, make_node
from orchestrator.nodes.setup import setup
from orchestrator.state import RunContext, RunState

STOP_STATUSES = ("blocked", "failed", "budget")
PIPELINE = ("setup", *(step.node for step in STEPS))


def is_stopped(state: RunState) -> bool:
    return state.get("status") in STOP_STATUSES


def continue_to(next_node: str) -> Callable[[RunState], str]:
    """Router: on to `next_node`, or straight to `finish` once a node has stopped the run."""
    def route(state: RunState) -> str:
        return "finish" if is_stopped(state) else next_node
    route.__name__ = f"route_to_{next_node}"
    return route


def build_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    builder = StateGraph(RunState, context_schema=RunContext)
    builder.add_node("setup", setup)
    for step in STEPS:
        builder.add_node(step.node, make_node(step))
    builder.add_node("finish", finish)
    builder.add_edge(START, "setup")
    for node, next_node in zip(PIPELINE, (*PIPELINE[1:], "finish")):
        builder.add_conditional_edges(node, continue_to(next_node), [next_node, "finish"] if next_node != "finish" else ["finish"])
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)
