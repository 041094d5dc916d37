"""The tiny local models the checks and the offline demo run: a random Qwen3-family model and the tiny agent
warm-started on the game's own turns. May import rules/ (how the game is played) and the layers below."""
