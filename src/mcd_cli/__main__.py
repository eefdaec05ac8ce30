"""`python -m mcd_cli` runs the `mcd` command line."""

from mcd_cli.cli import main

if __name__ == "__main__":
    main()
