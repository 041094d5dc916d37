"""Prompts for the two stages of an agent's turn in the Crossing game.

`create_thinking_prompt(obs_text, agent_id)` asks the agent to reason about the corridor;
`create_single_stage_prompt(obs_text, thinking_response, agent_id)` shows that reasoning and asks for exactly one
helper call as JSON. Both return chat messages [{"role": ..., "content": ...}]. Every action offered here is a
function in helpers.py.
"""

from __future__ import annotations

HELPER_CALLS = {
    "advance": "{} - one step towards your goal (down out of the bay first)",
    "yield_in_bay": "{} - make way: step towards the passing bay, into it, or wait in it",
    "move": '{"direction": "LEFT"|"RIGHT"|"UP"|"DOWN"|"STAY"} - one step that way',
    "wait": "{} - stay where you are",
}

SYSTEM_PROMPT = """You are an agent in Crossing, a corridor one cell wide shared with one other agent who walks
the other way. You cannot pass each other in the corridor: one of you must step up into the single passing bay
and wait while the other goes by. Every turn before you arrive costs you -1, arriving pays +10, and once both
of you have arrived each gets +5 more. If neither makes way, nobody arrives. Both agents move at the same time;
one move per turn. Score as much as you can over the whole episode."""


def _action_menu() -> str:
    return "\n".join(f"- {name} {doc}" for name, doc in HELPER_CALLS.items())


def create_thinking_prompt(obs_text: str, agent_id: int) -> list[dict[str, str]]:
    user = (f"{obs_text}\n\nActions you can take this turn:\n{_action_menu()}\n\n"
            f"Think briefly as agent {agent_id}: should you go on or make way, given where the other agent is and "
            "how many turns are left? Do not answer with JSON yet.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def create_single_stage_prompt(obs_text: str, thinking_response: str, agent_id: int) -> list[dict[str, str]]:
    messages = create_thinking_prompt(obs_text, agent_id)
    example = '{"action": "move", "agent_id": %d, "args": {"direction": "LEFT"}}' % agent_id
    messages += [
        {"role": "assistant", "content": thinking_response.strip() or "(no reasoning)"},
        {"role": "user", "content": f"Now give your action as ONE JSON object and nothing else, e.g. {example}. "
                                    f"Valid actions: {', '.join(HELPER_CALLS)}."},
    ]
    return messages
