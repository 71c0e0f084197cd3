from index.cli import main

main()
