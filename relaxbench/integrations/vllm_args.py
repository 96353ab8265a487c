"""``--engine-arg KEY=VALUE`` checked against the installed vLLM's own engine arguments, in the vLLM environment.

``python -m relaxbench.integrations.vllm_args`` reads ``{"engine_args": {...}}`` on stdin and answers one line on
its stdout: ``{"ok": true, "engine_args": {...typed...}, "vllm": VERSION}`` or ``{"ok": false, "error": "one
line"}``, with each key's own verdict (``verdicts``) and the table of vLLM's engine arguments (``table``), which the
driver keeps per installed vLLM (``vllm_arg_table``) to answer later checks without starting this interpreter. A
key must be a field of vLLM's ``EngineArgs``; its value is parsed by the parser ``vllm serve`` itself
builds (``EngineArgs.add_cli_args``), so a value is accepted exactly when vLLM's own command line accepts it, and
comes back in vLLM's type (``max_model_len=4k`` is 4000; a flag is true or false). ``quantization`` is also checked
against vLLM's list of methods, which its parser leaves to engine start. The driver (``vllm_client.check_engine_args``)
runs this before anything starts; nothing here builds an engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from relaxbench.integrations.vllm_arg_table import (TABLE_FORMAT, Refused, code_only, not_a_flag_value,
                                                    unknown_key, value_text, where)
from relaxbench.registry import did_you_mean


def _parser() -> argparse.ArgumentParser:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> Any:  # argparse prints usage and exits; the driver wants one line
            raise Refused(" ".join(message.split(" For further information")[0].split()))

    return EngineArgs.add_cli_args(Parser(prog="vllm"))


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def verdicts(given: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each key's verdict, in order: ``{"ok": True, "value": typed}`` or ``{"ok": False, "error": "one line"}``."""
    import vllm
    from vllm.engine.arg_utils import EngineArgs

    fields = sorted(f.name for f in dataclasses.fields(EngineArgs))
    parser = _parser()
    actions = {action.dest: action for action in parser._actions}  # noqa: SLF001 (argparse's one list of them)
    out: dict[str, dict[str, Any]] = {}
    for key, value in given.items():
        try:
            out[key] = {"ok": True, "value": _typed(key, value, fields, parser, actions, vllm.__version__)}
        except Refused as exc:
            out[key] = {"ok": False, "error": str(exc)}
    return out


def _typed(key: str, value: Any, fields: list[str], parser: argparse.ArgumentParser, actions: dict[str, Any],
           version: str) -> Any:
    if key not in fields:
        raise unknown_key(key, value, fields, version)
    action = actions.get(key)
    if action is None:
        raise code_only(key, value, version)
    option = next(o for o in action.option_strings if o.startswith("--"))
    if action.nargs == 0:  # a flag: --x (and --no-x where vLLM has it)
        if not isinstance(value, bool):
            raise not_a_flag_value(key, value)
        negative = next((o for o in action.option_strings if o.startswith("--no-")), None)
        argv = [option] if value else [negative] if negative else []
    else:
        argv = [option, value_text(value)]
    try:
        typed = getattr(parser.parse_args(argv), key) if argv else False
    except Refused as exc:
        raise Refused(f"{where(key, value)}: {exc}") from None
    if key == "quantization" and typed is not None:
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

        if typed not in QUANTIZATION_METHODS:
            raise Refused(f"{where(key, value)}: not a quantization method of vLLM {version}"
                          f"{did_you_mean(str(typed), list(QUANTIZATION_METHODS))}")
    return typed if _jsonable(typed) else value


def table() -> dict[str, Any]:
    """The fields of vLLM's ``EngineArgs`` as its parser takes them (``vllm_arg_table``'s format): for each field
    its command-line options, whether it is a flag, its type when a plain ``int`` or
    ``float``, and whether it has choices."""
    import vllm
    from vllm.engine.arg_utils import EngineArgs

    fields = sorted(f.name for f in dataclasses.fields(EngineArgs))
    described: dict[str, Any] = {}
    for action in _parser()._actions:  # noqa: SLF001
        if action.dest not in fields or not action.option_strings:
            continue
        kind = {int: "int", float: "float"}.get(action.type)  # type: ignore[call-overload]
        described[action.dest] = {
            "options": list(action.option_strings), "flag": action.nargs == 0,
            "type": kind, "choices": action.choices is not None,
        }
    return {"format": TABLE_FORMAT, "vllm": vllm.__version__, "fields": fields, "actions": described}


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # vLLM's own output goes to stderr
    sys.stdout = sys.stderr
    import vllm

    given = json.loads(sys.stdin.read())["engine_args"]
    each = verdicts(given)
    refused = next((v["error"] for v in each.values() if not v["ok"]), None)
    reply: dict[str, Any] = {"ok": refused is None, "vllm": vllm.__version__, "verdicts": each, "table": table()}
    if refused is None:
        reply["engine_args"] = {key: v["value"] for key, v in each.items()}
    else:
        reply["error"] = refused
    replies.write(json.dumps(reply) + "\n")
    replies.flush()


if __name__ == "__main__":
    main()
