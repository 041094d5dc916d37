"""Prompts for the two generation stages of a hunter's turn in the Stag Hunt game.

`create_thinking_prompt(obs_text, agent_id)` asks the hunter to reason about the board;
`create_single_stage_prompt(obs_text, thinking_response, agent_id)` shows that reasoning and asks
for exactly ONE helper call as JSON. Both return chat messages [{"role": ..., "content": ...}].
Every key of HELPER_CALLS is a function in helpers.py, called as NAME(env, agent_id, **args).
"""

from __future__ import annotations

# helper name -> (JSON args, what it does); the only actions the prompts mention
HELPER_CALLS: dict[str, tuple[str, str]] = {
    "approach_stag": ("{}", "walk towards a free cell next to the nearest stag; waits there once arrived"),
    "hunt": ("{}", "attack the animal next to you (a stag first, else a hare)"),
    "chase_nearest_hare": ("{}", "hunt a hare alone: HUNT if one is next to you, else step towards the nearest"),
    "move_to": ('{"row": int, "col": int}', "one step along a shortest path to that cell"),
    "move": ('{"direction": "N" | "S" | "E" | "W"}', "one step in that direction"),
    "wait": ("{}", "stay where you are this turn"),
}

GAME_RULES = """You are a hunter in Stag Hunt, a grid game played by several hunters at the same time.
Positions are (row, col); row 0 is the top, col 0 is the left. N lowers the row, S raises it,
E raises the col, W lowers it. "Next to" means one of the 4 orthogonal neighbours.

Animals:
- Hare (h): one hunter next to it who hunts catches it alone: +1 (split if several hunt it).
- Stag (S): caught only if AT LEAST TWO hunters next to it hunt in the SAME turn: +5 EACH.
  A hunter who attacks the stag alone gets -0.5 and the stag runs away to a distant cell.
  A stag sometimes wanders one cell per turn. Hunting next to a stag always attacks the stag.
- Caught animals reappear at a random cell away from the hunters. Nobody can step onto an animal.

All hunters choose their moves at the same time; then moves happen, then hunts. The game lasts a
fixed number of turns; your score is the sum of your rewards. Hunting the stag together pays far
more than hares, but only if your partner is next to the stag and hunts in the same turn.
A sensible plan: walk next to the stag with approach_stag, wait there until another hunter is next
to it too, then both use hunt. If no partner comes, hares are the safe choice."""


def _action_menu() -> str:
    return "\n".join(f"- {name} args {args}: {what}" for name, (args, what) in HELPER_CALLS.items())


def create_thinking_prompt(obs_text: str, agent_id: int) -> list[dict]:
    """Stage 1: reason about the situation (no JSON yet)."""
    user = (f"{obs_text}\n\nActions you can take this turn:\n{_action_menu()}\n\n"
            f"You are hunter {agent_id}. Think briefly: where is the stag, where is your partner, is it "
            "worth going for the stag together or for a hare alone, and what should you do THIS turn? "
            "Do not write the JSON action yet.")
    return [{"role": "system", "content": GAME_RULES}, {"role": "user", "content": user}]


def create_single_stage_prompt(obs_text: str, thinking_response: str, agent_id: int) -> list[dict]:
    """Stage 2: given the reasoning, answer with exactly one JSON helper call."""
    example = '{"action": "approach_stag", "agent_id": %d, "args": {}}' % agent_id
    example_args = '{"action": "move_to", "agent_id": %d, "args": {"row": 3, "col": 4}}' % agent_id
    user = (f"{obs_text}\n\nActions you can take this turn:\n{_action_menu()}\n\n"
            f"Your reasoning as hunter {agent_id}:\n{thinking_response.strip() or '(none)'}\n\n"
            "Now choose ONE action. Reply with a single JSON object and nothing else, in the form "
            '{"action": NAME, "agent_id": ' + str(agent_id) + ', "args": {...}}, for example\n'
            f"{example}\n{example_args}")
    return [{"role": "system", "content": GAME_RULES}, {"role": "user", "content": user}]
