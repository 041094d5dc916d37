"""Named exits: the one place where limits are checked, and the exceptions that stop a run at a node.

A node that is about to spend tokens calls `ensure_budget` first. Exceeding a cap raises
`BudgetExceeded` before any work starts, so the checkpoint still points at that node and
`resume --max-cost/--max-tokens` re-enters it without re-paying for finished nodes. A check whose
failure is the machine's raises `MachineFault` the same way: `resume` re-runs the check, not a fix; a formal
run whose job the researcher cancelled raises `Cancelled`: `resume` goes on with the next job.
"""

from __future__ import annotations

from orchestrator.run.runs import spent
from orchestrator.run.state import Limits, RunState


class RunStopped(Exception):
    """Ends a run early with a status and a one-line reason (and the evidence that stopped it, if any)."""

    status = "failed"
    evidence: dict | None = None


class BudgetExceeded(RunStopped):
    status = "budget"


class MachineFault(RunStopped):
    """A check failed because of the machine, not the code (orchestrator.faults): no fix can help, so the run
    stops before one is paid for, with the check still next: `resume` runs it again once the machine is right."""

    status = "environment"

    def __init__(self, reason: str, evidence: dict | None = None) -> None:
        super().__init__(reason)
        self.evidence = evidence


class Cancelled(RunStopped):
    """The researcher cancelled the formal run's job from outside (scancel): no fix is asked for; the run stops with
    formal_train still next, and `resume` starts the next job, which goes on from the checkpoint."""

    status = "cancelled"


def ensure_budget(state: RunState, limits: Limits, node: str) -> None:
    tokens, cost = spent(state)
    if limits.max_cost_usd is not None and cost >= limits.max_cost_usd:
        raise BudgetExceeded(f"cost cap reached before {node}: ${cost:.4f} spent of ${limits.max_cost_usd:.4f}; "
                             f"raise it with `resume RUN --max-cost X`")
    if limits.max_tokens is not None and tokens >= limits.max_tokens:
        raise BudgetExceeded(f"token cap reached before {node}: {tokens} spent of {limits.max_tokens}; "
                             f"raise it with `resume RUN --max-tokens N`")
