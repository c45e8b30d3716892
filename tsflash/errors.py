"""One home for user-facing errors.

A `UserError` is a mistake by the person running tsflash (bad argument, bad file, missing data).
The CLI prints its message as one line and exits with status 2, without a traceback. Messages
name the rule, then the values: "--lengths: every length must be a positive power of two, got 0".
"""


class UserError(Exception):
    """A mistake in the user's input; the message names the rule and the offending values."""
