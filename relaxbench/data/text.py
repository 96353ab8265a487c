"""Text a tokenizer can encode: a string with a lone surrogate (what Python makes of bytes that are not UTF-8 on
the command line, or of a ``\\ud800`` escape in JSON) makes the tokenizer raise a ``TypeError`` deep inside; it is
refused here in one line that says where it is."""

from __future__ import annotations

import re
from typing import Any

from relaxbench.errors import DataError

_SURROGATE = re.compile("[\ud800-\udfff]")


def unencodable_at(text: str) -> int | None:
    """The index of the first character no UTF-8 encoding holds (a lone surrogate), or None."""
    match = _SURROGATE.search(text)
    return None if match is None else match.start()


def check_text(text: str, where: str) -> None:
    """Refuse ``text`` when it holds a lone surrogate, naming ``where`` (a flag, a row's field) and the character."""
    index = unencodable_at(text)
    if index is not None:
        code = ord(text[index])
        why = ("a byte that is not UTF-8" if 0xDC80 <= code <= 0xDCFF else "a lone surrogate, not a character")
        raise DataError(f"{where}: character {index + 1} is not valid text (U+{code:04X}, {why}); give UTF-8 text")


def check_row_text(row: dict[str, Any], where: str) -> None:
    """Every string of a data row (nested lists and objects included: chat turns, messages), named by its path:
    ``row 3, field 'turns'[1]``."""
    for key, value in row.items():
        _check_value(value, f"{where}, field {key!r}")


def _check_value(value: Any, where: str) -> None:
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, dict):
        for key, inner in value.items():
            _check_value(inner, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, inner in enumerate(value):
            _check_value(inner, f"{where}[{i}]")


def first_undecodable_line(data: bytes) -> tuple[int, int] | None:
    """The (line, byte column), both from 1, of the first bytes of ``data`` that are not UTF-8, or None."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return number, exc.start + 1
    return None
