"""Processes, files and git, knowing nothing of the pipeline: subprocesses and their groups, halt points, the
action log, the workspace's git and its lock, whole-file writes and stored paths. Imports nothing above it."""
