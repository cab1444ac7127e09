"""The one exception type the CLI turns into a single clear line instead of a stack trace."""


class LakehouseError(Exception):
    """A problem the user can fix (bad config, missing tool, port taken, ...).

    The message must say what is wrong and, where possible, what to do about it.
    """
