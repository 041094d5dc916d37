"""The generate-debug-iterate orchestrator. Its folders are layers; each imports only the layers below it:

    cli, demo, __main__   commands and the offline demo
    runner                starts and resumes runs (the only module that invokes the graph)
    graph                 the StateGraph wiring
    nodes/, page/         the pipeline's steps; the run's page
    run/                  a run's books: settings, status, caps, journal (what status/list/history/report read)
    tiny/                 the tiny local model and agent
    checks, faults        the three checks as CheckResults; a failure's cause, code or machine
    rules/                the brief's rules, static and by behaviour
    training/             a training run: machine, plan, job, monitor, logs
    llm/                  the LLM backends, one exchange, edits, prompts
    base/, sources/       processes, files and git; the researcher's files
"""
