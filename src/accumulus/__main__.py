from accumulus.cli import main

main()
