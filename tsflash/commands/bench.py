"""`tsflash bench` (placeholder until its issue lands)."""


def register(sub) -> None:
    p = sub.add_parser("bench", help="(not yet available)")
    p.set_defaults(func=lambda args: 0)
