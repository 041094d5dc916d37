from orchestrator.rules.probe.contract import main

main()
