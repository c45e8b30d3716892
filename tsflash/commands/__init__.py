"""The command line's subcommand groups, one module each: `data` (import, inspect, fetch and carry
the bar store), `bench` (the precision, attention and training-step benchmarks), `sweep` (train and
score every N), `report` (rebuild or re-score a run's report), `confirm` (re-test a finished sweep
on later bars) and `runs` (list past runs); `options` holds the options several of them share and
the argparse type functions that check values. Each group exposes `register(subparsers)`;
`tsflash.cli` wires them together in the order `tsflash --help` lists them
(`tsflash.cli.COMMAND_GROUPS`). Heavy imports stay inside the functions that run a command, so
parsing loads no torch."""

__all__: list[str] = []  # nothing to re-export: the modules are the CLI's, reached through tsflash.cli
