from gemmbench.cli import main

main()
