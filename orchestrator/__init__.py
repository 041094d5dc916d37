"""The generate-debug-iterate orchestrator. Its folders are layers; each imports only the layers below it:

    cli, demo, trying,    commands, the offline demo, `try` (one idea of a run as a child run)
    __main__
    runner                starts and resumes runs (the only module that invokes the graph)
    graph                 the StateGraph wiring
    nodes/, page/         the pipeline's steps; the run's page and the comparison page (seed_runs writes one)
    run/, ideas/          a run's books: settings, status, caps, journal (what status/list/history/report read);
                          a child run's lineage, its arms' seed runs and the verdict between them
    tiny/                 the tiny local model and agent
    checks, faults        the three checks as CheckResults; a failure's cause, code or machine
    rules/                the brief's rules, static and by behaviour
    training/             a training run: machine, plan, job, monitor, logs
    llm/                  the LLM backends, one exchange, edits, prompts
    base/, sources/       processes, files and git; the researcher's files
"""
