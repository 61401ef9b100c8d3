"""`python -m guardless …`: the `guardless` command."""

from .cli import main

main()
