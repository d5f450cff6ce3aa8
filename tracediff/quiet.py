"""Silence torch's import-time warnings about the environment, which are not about the user's program.

torch warns "Failed to initialize NumPy" when it is imported where numpy is
not installed (numpy is optional for torch and for tracediff: seeding skips
it). tracediff imports torch itself, in the CLI and in each run before the
script starts, so without this every run of every script would print it
twice. Only this message is filtered; the script's own warnings are untouched.
"""

from __future__ import annotations

import warnings


def silence_missing_numpy() -> None:
    """Call before torch is first imported in this process."""
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
