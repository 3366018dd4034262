"""Names that users give (model names, system ids, labels), checked before they reach a database or a table.

A name is stored and printed as it is: a newline or an escape sequence in it would break every table
it is shown in, and a name of 100,000 characters would fill them. :func:`identifier_problem` says
what makes a name unfit, :func:`check_identifier` refuses it in one line that shows it shortened
and escaped (:func:`shown`).
"""

from __future__ import annotations

import reprlib

from dlbricks.errors import InvalidArgumentError

__all__ = ["MAX_IDENTIFIER", "check_identifier", "identifier_problem", "shown"]

#: The most characters of an identifier stored (a system id, a model name).
MAX_IDENTIFIER = 200
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = 60


def shown(value: str) -> str:
    """``repr(value)`` shortened to about 60 characters: one line, control characters escaped."""
    return _SHOWN.repr(value)


def identifier_problem(value: str) -> str | None:
    """What makes ``value`` unfit as an identifier (blank, a control or other unprintable character,
    longer than :data:`MAX_IDENTIFIER`), in words; None when it is fit."""
    if not value.strip():
        return "is blank"
    if len(value) > MAX_IDENTIFIER:
        return f"is {len(value)} characters long, over the {MAX_IDENTIFIER} allowed"
    bad = next((i for i, c in enumerate(value) if not c.isprintable()), None)
    if bad is not None:
        return f"has the unprintable character {value[bad]!r} at position {bad}"
    return None


def check_identifier(value: str, what: str, todo: str) -> str:
    """``value``, refused where :func:`identifier_problem` finds it unfit.

    Parameters
    ----------
    value : str
        The name as the user gave it.
    what : str
        What it is, for the message: ``"The model name"``, ``"--system-id"``.
    todo : str
        What to do instead, for the message: ``"rename the model file"``.

    Raises
    ------
    InvalidArgumentError
        ``"The model name 'a\\nb' has the unprintable character '\\n' at position 1; rename the model
        file (a name of printable text, at most 200 characters)."``

    Examples
    --------
    >>> check_identifier("resnet50", "The model name", "rename the model file")
    'resnet50'
    """
    problem = identifier_problem(value)
    if problem is not None:
        raise InvalidArgumentError(f"{what} {shown(value)} {problem}; {todo} (a name of printable text, at most "
                                   f"{MAX_IDENTIFIER} characters).")
    return value
