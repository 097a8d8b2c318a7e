from noetl.cli.main import main

main()
