"""The ``dlbricks`` console script.

It lives outside the ``dlbricks`` package so that Ctrl-C while the package is still being imported
exits with code 130 and one line, like Ctrl-C at any later moment, instead of a traceback.
"""

import signal
import sys


def main() -> None:
    """Import and run ``dlbricks.cli.main``; exit 130 if Ctrl-C interrupts the imports."""
    seen: list[int] = []

    def on_sigint(signum: int, frame: object) -> None:
        seen.append(signum)
        signal.default_int_handler(signum, frame)

    def unraisable(hook: object) -> None:
        # a KeyboardInterrupt raised in a callback the interpreter runs on its own (importlib's
        # module-lock weakref) is "ignored" with a traceback: the exit below reports it instead
        if not isinstance(getattr(hook, "exc_value", None), KeyboardInterrupt):
            previous_hook(hook)  # type: ignore[arg-type]

    previous = signal.signal(signal.SIGINT, on_sigint)
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        from dlbricks.cli import main as cli
    except BaseException:
        if seen:  # KeyboardInterrupt, or the ImportError of an extension module it interrupted
            sys.stderr.write("Interrupted.\n")
            raise SystemExit(130) from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
    if seen:  # Ctrl-C swallowed by an import that caught it: stop all the same
        sys.stderr.write("Interrupted.\n")
        raise SystemExit(130)
    cli()
