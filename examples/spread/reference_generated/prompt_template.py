"""Prompts for the two generation stages of an agent's turn in Spread (mpe2's simple_spread).

`create_thinking_prompt(obs_text, agent_id)` asks the agent to reason about the world;
`create_single_stage_prompt(obs_text, thinking_response, agent_id)` shows that reasoning and asks for
exactly ONE helper call as JSON. Both return chat messages [{"role": ..., "content": ...}]. Every key of
HELPER_CALLS is a function in helpers.py, called as NAME(env, agent_id, **args).
"""

from __future__ import annotations

# helper name -> (JSON args, what it does this turn); the only actions the prompts mention
HELPER_CALLS: dict[str, tuple[str, str]] = {
    "cover_assigned_landmark": ("{}", "go to your own landmark in the one-to-one split every agent computes alike "
                                      "(smallest total distance)"),
    "go_to_landmark": ('{"landmark": int}', "go to that landmark (its number in the observation)"),
    "go_to_nearest_landmark": ("{}", "go to the landmark nearest to you, even if another agent is heading there"),
    "move_toward": ('{"x": float, "y": float}', "go to that point"),
    "avoid_nearest_agent": ("{}", "push away from the nearest other agent"),
    "brake": ("{}", "slow down and stop"),
    "push": ('{"direction": "left" | "right" | "down" | "up" | "no_op"}', "one raw push that way"),
}

GAME_RULES = """You are one of several agents in Spread, a cooperative game in a continuous 2-D world.
Positions are (x, y): x grows to the right, y grows upwards; the world starts inside [-1, +1] x [-1, +1].
There are as many landmarks as agents. Every turn the whole team is scored minus the sum, over the
landmarks, of the distance from each landmark to its closest agent: the score is best (0) when every
landmark has its own agent on it. Two agents closer than 0.3 overlap and each loses 1 per turn.
Your reward mixes your own overlap penalties with the team's score, so covering the landmarks together
is what pays.
Agents have momentum: a push changes your velocity, you keep drifting after you stop pushing, and you
need to brake before a target. All agents move at the same time, one action each per turn, without
talking. If everybody rushes to the landmark nearest to them, several end up on the same one, collide,
and leave others uncovered: agree without words on who takes which landmark (the one-to-one split of
cover_assigned_landmark is the same for everybody who uses it)."""


def _action_menu() -> str:
    return "\n".join(f"- {name} args {args}: {what}" for name, (args, what) in HELPER_CALLS.items())


def create_thinking_prompt(obs_text: str, agent_id: int) -> list[dict[str, str]]:
    """Stage 1: reason about the situation (no JSON yet)."""
    user = (f"{obs_text}\n\nActions you can take this turn:\n{_action_menu()}\n\n"
            f"You are agent {agent_id}. Think briefly: which landmark should be yours so that every landmark gets "
            "its own agent, is anyone heading for the same one or overlapping you, and what should you do THIS "
            "turn? Do not write the JSON action yet.")
    return [{"role": "system", "content": GAME_RULES}, {"role": "user", "content": user}]


def create_single_stage_prompt(obs_text: str, thinking_response: str, agent_id: int) -> list[dict[str, str]]:
    """Stage 2: given the reasoning, answer with exactly one JSON helper call."""
    example = '{"action": "cover_assigned_landmark", "agent_id": %d, "args": {}}' % agent_id
    example_args = '{"action": "move_toward", "agent_id": %d, "args": {"x": 0.25, "y": -0.5}}' % agent_id
    user = (f"{obs_text}\n\nActions you can take this turn:\n{_action_menu()}\n\n"
            f"Your reasoning as agent {agent_id}:\n{thinking_response.strip() or '(none)'}\n\n"
            "Now choose ONE action. Reply with a single JSON object and nothing else, in the form "
            '{"action": NAME, "agent_id": ' + str(agent_id) + ', "args": {...}}, for example\n'
            f"{example}\n{example_args}")
    return [{"role": "system", "content": GAME_RULES}, {"role": "user", "content": user}]
