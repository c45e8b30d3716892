"""One home for user-facing errors.

A `UserError` is a mistake by the person running tsflash (bad argument, bad file, missing data).
The CLI prints its message as one line and exits with status 2, without a traceback. Messages
name the rule, the user's key or flag, then the values: "train.lr must be > 0, got -1.0".
"""


class UserError(Exception):
    """A mistake in the user's input; the message names the rule and the offending values."""


class UsageError(UserError):
    """A command-line error as argparse words it, already a whole line:
    "tsflash bench train: error: argument --steps: must be an integer >= 1, got 0"."""
