"""``python -m dlbricks.benchmarks_db``: the ``bench`` command and the ``db`` group on their own."""

from dlbricks.benchmarks_db.cli import main

if __name__ == "__main__":
    main()
