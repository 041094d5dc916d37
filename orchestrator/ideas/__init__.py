"""From ideas to evidence: a run's ideas (catalog: future_improvements.md, numbered), a child run's lineage (the
parent it started from, the idea it tries, its seeds: lineage), the arms' metric series read as the monitor reads
them (arms), and the verdict between two arms over seeds (verdict). At the level of run/: may import run/,
training/, sources/, llm/ and base/; never nodes/, the graph or the runner."""
