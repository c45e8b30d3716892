"""`tsflash sweep` (placeholder until its issue lands)."""


def register(sub) -> None:
    p = sub.add_parser("sweep", help="(not yet available)")
    p.set_defaults(func=lambda args: 0)
