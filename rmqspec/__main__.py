"""``python -m rmqspec``: the command line."""

from rmqspec.cli import main

main()
