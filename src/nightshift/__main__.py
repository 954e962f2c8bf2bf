"""``python -m nightshift`` runs the CLI."""

from nightshift.cli import main

main()
