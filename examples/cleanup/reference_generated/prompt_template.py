"""Prompts for the two stages of an agent's turn in the Cleanup game.

`create_thinking_prompt(obs_text, agent_id)` asks the agent to reason about the board;
`create_single_stage_prompt(obs_text, thinking_response, agent_id)` shows that reasoning and asks for
exactly one helper call as JSON. Both return chat messages [{"role": ..., "content": ...}]. Every
action offered here is a function in helpers.py.
"""

from __future__ import annotations

HELPER_CALLS = {
    "collect_nearest_apple": "{} - step towards the nearest apple (eaten on arrival, +1)",
    "clean_nearest_dirt": "{} - clean dirt in the beam ahead, or step towards the nearest dirt",
    "move_to": '{"coord_x": int, "coord_y": int} - one step towards that cell',
    "move": '{"direction": "UP"|"DOWN"|"LEFT"|"RIGHT"} - one step that way',
    "clean": "{} - fire the cleaning beam in the direction you face",
    "stay": "{} - do nothing",
}

SYSTEM_PROMPT = """You are an agent in Cleanup, a grid game shared with other agents.
Eating an apple gives you +1. Apples grow only in the orchard, and they grow more slowly the dirtier
the river is: once 40% of the river is dirty, no apple grows at all. Dirt keeps appearing in the river,
so somebody has to clean it for anyone to keep eating. All agents move at the same time; one action
per turn. Score as much as you can over the whole episode, not only this turn."""


def _action_menu() -> str:
    return "\n".join(f"- {name} {doc}" for name, doc in HELPER_CALLS.items())


def create_thinking_prompt(obs_text: str, agent_id: int) -> list[dict[str, str]]:
    user = (f"{obs_text}\n\nActions you can take this turn:\n{_action_menu()}\n\n"
            f"Think briefly as agent {agent_id}: what is the best thing to do now, given the dirt level, "
            "the apples and what the other agents are doing? Do not answer with JSON yet.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def create_single_stage_prompt(obs_text: str, thinking_response: str, agent_id: int) -> list[dict[str, str]]:
    messages = create_thinking_prompt(obs_text, agent_id)
    example = '{"action": "move_to", "agent_id": %d, "args": {"coord_x": 3, "coord_y": 4}}' % agent_id
    messages += [
        {"role": "assistant", "content": thinking_response.strip() or "(no reasoning)"},
        {"role": "user", "content": f"Now give your action as ONE JSON object and nothing else, e.g. {example}. "
                                    f"Valid actions: {', '.join(HELPER_CALLS)}."},
    ]
    return messages
