from agent.cli.commands import main

main()
