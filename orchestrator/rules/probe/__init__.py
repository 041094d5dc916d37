"""The dynamic layer's child: run in a fresh interpreter on a generated folder (`python -m
orchestrator.rules.probe FOLDER PLAN`), it imports the generated modules, plays them on a real game
and compares what they do with what the researcher's own code does. Standard library only: torch and
the like are used only where the generated code has already imported them."""
