"""Command-line flags built from a spec's own field declarations (``validation.Option``): a field declared once —
its type, default, help, flag name, form and what it changes in the run key — is its flag, its suite-file key and
its validation, with no other edit.

Every flag defaults to None, so what a user typed is told apart from what the suite file or the spec's default
gives; ``given_values`` returns what was typed, in the field's shape (a ``csv`` flag as typed, an ``append`` flag
as a tuple, an ``assign`` flag as a mapping)."""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any

from pydantic import BaseModel

from relaxbench.validation import parse_assignments, spec_options


def scalar_type(annotation: Any) -> Any:
    """The Python type a ``value`` flag parses to (int, float or str), from the field's annotation; the bounds and
    finiteness are the field's own validation's."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
        return scalar_type(annotation)
    return annotation if annotation in (int, float) else str


def add_spec_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """A flag for every field of ``model`` that declares one."""
    for name, option in spec_options(model).items():
        if option.flag is None:
            continue
        names = [*([option.short] if option.short else []), option.flag_name(name)]
        kwargs: dict[str, Any] = {"dest": name, "help": option.help or None}
        if option.form == "switch":
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = option.metavar or ("KEY=VALUE" if option.form == "assign" else None)
            if option.form in ("append", "assign"):
                kwargs["action"] = "append"
            elif option.form == "value":
                kwargs["type"] = scalar_type(model.model_fields[name].annotation)
        parser.add_argument(*names, default=None,  # None: not typed (a switch's default would be False)
                            **{key: value for key, value in kwargs.items() if value is not None})


def given_values(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The fields of ``model`` the command line gave, in the field's shape; each ``KEY=VALUE`` refused in one line
    naming its flag."""
    given: dict[str, Any] = {}
    for name, option in spec_options(model).items():
        value = getattr(args, name, None) if option.flag is not None else None
        if value is None:
            continue
        if option.form == "assign":
            value = parse_assignments(value, option.flag_name(name))
        elif option.form == "append":
            value = tuple(value)
        given[name] = value
    return given


def declared(model: type[BaseModel], form: str) -> list[str]:
    """The fields of ``model`` whose flag has this form."""
    return [name for name, option in spec_options(model).items() if option.form == form and option.flag is not None]

