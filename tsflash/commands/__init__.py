"""CLI subcommand groups; see tsflash/cli.py."""
