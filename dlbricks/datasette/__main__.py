"""``python -m dlbricks.datasette DB... [-o FILE]``: Datasette metadata keyed for the database files
given (see :mod:`dlbricks.datasette`)."""

from __future__ import annotations

import argparse
import json
import sys

from . import metadata


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlbricks.datasette",
        description="Write Datasette metadata (table descriptions, canned queries) for brick databases; then "
                    "run: datasette DB... --metadata FILE")
    parser.add_argument("databases", nargs="*", metavar="DB", help="Database files (default: dlbricks.db).")
    parser.add_argument("-o", "--output", metavar="FILE", help="Write there instead of printing.")
    args = parser.parse_args(argv)
    text = json.dumps(metadata(*args.databases), indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        parser.exit(2, f"Error: cannot write {args.output!r}: {e.strerror}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
