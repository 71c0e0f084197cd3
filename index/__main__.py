from index.build.cli import main

main()
