"""The ``dlbricks`` console script.

It lives outside the ``dlbricks`` package so that Ctrl-C while the package is still being imported
exits with code 130 and one line, like Ctrl-C at any later moment, instead of a traceback.
"""

import sys


def main() -> None:
    """Import and run ``dlbricks.cli.main``; exit 130 if interrupted while importing."""
    try:
        from dlbricks.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        raise SystemExit(130) from None
    cli()
