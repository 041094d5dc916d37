"""A run's books: settings and status (what `status`, `list`, `history` read, without the graph), the graph's
state, the caps, the journal of paid answers, the source-of-truth check. May import checks, rules/, training/,
llm/, base/, sources/; never the graph."""
