"""`python -m gateway` is the `memgate` command."""

from gateway.cli.main import main

if __name__ == "__main__":
    main()
