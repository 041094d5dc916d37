"""A training run: the machine probe and sizing, the formal plan, the watched job, the monitor, log formats,
curves, the census of training processes (and the check inside each), a SLURM job's environment, the manifest.
May import sources/, base/ and llm/."""
