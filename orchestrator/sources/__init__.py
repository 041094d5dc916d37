"""The researcher's files as the pipeline reads them: the template's marker sections, the config dataclass,
its fields by role. The bottom layer: imports nothing of the orchestrator's outside this folder."""
