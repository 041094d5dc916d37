"""The StateGraph: nodes, edges and routers. Nodes live in orchestrator/nodes; this file only wires them.

    setup -> map_roles -> generate_helpers -> generate_prompts -> generate_train -> generate_launch
          -> rules -> import_check -> runtime_check -> formal_train -> review -> finish
    a failing check or a stopped formal run -> fix -> rules (every check re-runs, cheapest first)
    a stopped run (blocked, budget, failed) -> finish
    a child run (one idea of its parent's review, orchestrator.ideas): generate_launch -> apply_idea -> rules, and
    formal_train -> seed_runs -> review
"""

from __future__ import annotations

from typing import Callable

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from orchestrator.nodes.checks import CHECK_NODES
from orchestrator.nodes.finish import finish
from orchestrator.nodes.fix import fix
from orchestrator.nodes.generate import STEPS, make_node
from orchestrator.nodes.idea import NODE as APPLY_IDEA, applied, apply_idea
from orchestrator.nodes.review import review
from orchestrator.nodes.roles import map_roles
from orchestrator.nodes.seeds import NODE as SEED_RUNS, seed_runs
from orchestrator.nodes.setup import setup
from orchestrator.nodes.train import formal_train
from orchestrator.run.state import RunContext, RunState

STOP_STATUSES = ("blocked", "failed", "budget")
GENERATION = ("setup", "map_roles", *(step.node for step in STEPS))
CHECKS = ("rules", "import_check", "runtime_check", "formal_train")
NODES = (*GENERATION, APPLY_IDEA, *CHECKS, "fix", SEED_RUNS, "review", "finish")


def is_stopped(state: RunState) -> bool:
    return state.get("status") in STOP_STATUSES


def continue_to(node: str, next_node: str) -> Callable[[RunState], str]:
    """Router after a step: on to `next_node`, or to `finish` once the run has stopped or reached `until`."""
    def route(state: RunState) -> str:
        return "finish" if is_stopped(state) or state.get("until") == node else next_node
    route.__name__ = f"route_{node}_to_{next_node}"
    return route


def after_check(node: str, next_node: str) -> Callable[[RunState], str]:
    """Router after a check: `fix` when it left evidence, `finish` when its fix budget is spent."""
    def route(state: RunState) -> str:
        if is_stopped(state):
            return "finish"
        if state.get("evidence"):
            return "fix"
        return "finish" if state.get("until") == node else next_node
    route.__name__ = f"route_after_{node}_to_{next_node}"
    return route


def after_generation(state: RunState) -> str:
    """After the last generation step: a child run applies its idea first, then every check runs."""
    route = continue_to(GENERATION[-1], CHECKS[0])(state)
    return APPLY_IDEA if route == CHECKS[0] and state.get("idea") and not applied(state) else route


def after_formal_train(state: RunState) -> str:
    """Like any check, plus a restart when a small issue was fixed by raising a config value; a child run trains
    both arms on its other seeds before the review."""
    if state.get("restart_formal") and not is_stopped(state):
        return "formal_train"
    route = after_check("formal_train", "review")(state)
    return SEED_RUNS if route == "review" and state.get("idea") else route


def build_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    builder = StateGraph(RunState, context_schema=RunContext)
    builder.add_node("setup", setup)
    builder.add_node("map_roles", map_roles)
    for step in STEPS:
        builder.add_node(step.node, make_node(step))
    for name, node in CHECK_NODES.items():
        builder.add_node(name, node)
    builder.add_node("formal_train", formal_train)
    builder.add_node("fix", fix)
    builder.add_node(APPLY_IDEA, apply_idea)
    builder.add_node(SEED_RUNS, seed_runs)
    builder.add_node("review", review)
    builder.add_node("finish", finish)

    builder.add_edge(START, "setup")
    for node, next_node in zip(GENERATION[:-1], GENERATION[1:]):
        builder.add_conditional_edges(node, continue_to(node, next_node), [next_node, "finish"])
    builder.add_conditional_edges(GENERATION[-1], after_generation, [APPLY_IDEA, CHECKS[0], "finish"])
    builder.add_conditional_edges(APPLY_IDEA, continue_to(APPLY_IDEA, CHECKS[0]), [CHECKS[0], "finish"])
    for node, next_node in zip(CHECKS[:-1], CHECKS[1:]):
        builder.add_conditional_edges(node, after_check(node, next_node), [next_node, "fix", "finish"])
    builder.add_conditional_edges("formal_train", after_formal_train,
                                  ["formal_train", SEED_RUNS, "review", "fix", "finish"])
    builder.add_conditional_edges(SEED_RUNS, continue_to(SEED_RUNS, "review"), ["review", "finish"])
    builder.add_conditional_edges("fix", continue_to("fix", "rules"), ["rules", "finish"])
    builder.add_edge("review", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)
