"""The one exception type for mistakes a user can make (bad config, missing file, ...).

The CLI turns it into one line on stderr and exit code 2; everything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem the user can fix; the message says how."""
