"""User-facing errors: one actionable sentence, turned into a non-zero exit by the CLI."""

# What the CLI puts before that sentence on stderr (a parent relaying a child command's sentence strips it).
ERROR_PREFIX = "error: "


class ApplianceError(Exception):
    """An error a person can act on. The message is shown as-is, without a traceback."""


class PackError(ApplianceError):
    """A task pack is malformed; the message names the file and line."""


class StoreError(ApplianceError):
    """The run store cannot be opened or written."""
