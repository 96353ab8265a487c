"""``--engine-arg KEY=VALUE`` checked against the installed vLLM's own engine arguments, in the vLLM environment.

``python -m relaxbench.integrations.vllm_args`` reads ``{"engine_args": {...}}`` on stdin and answers one line on
its stdout: ``{"ok": true, "engine_args": {...typed...}, "vllm": VERSION}`` or ``{"ok": false, "error": "one
line"}``. A key must be a field of vLLM's ``EngineArgs``; its value is parsed by the parser ``vllm serve`` itself
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

from relaxbench.registry import did_you_mean


class Refused(Exception):
    """A key or a value vLLM's parser refuses (one line)."""


def _parser() -> argparse.ArgumentParser:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> Any:  # argparse prints usage and exits; the driver wants one line
            raise Refused(" ".join(message.split(" For further information")[0].split()))

    return EngineArgs.add_cli_args(Parser(prog="vllm"))


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def check(given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with every value in vLLM's type; ``Refused`` for an unknown key or a value vLLM refuses."""
    import vllm
    from vllm.engine.arg_utils import EngineArgs

    fields = sorted(f.name for f in dataclasses.fields(EngineArgs))
    parser = _parser()
    actions = {action.dest: action for action in parser._actions}  # noqa: SLF001 (argparse's one list of them)
    out: dict[str, Any] = {}
    for key, value in given.items():
        where = f"--engine-arg {key}={_text(value)}"
        if key not in fields:
            raise Refused(f"{where}: not an engine argument of vLLM {vllm.__version__}{did_you_mean(key, fields)}")
        action = actions.get(key)
        if action is None:
            raise Refused(f"{where}: vLLM {vllm.__version__} takes it from code only, not from its command line")
        option = next(o for o in action.option_strings if o.startswith("--"))
        if action.nargs == 0:  # a flag: --x (and --no-x where vLLM has it)
            if not isinstance(value, bool):
                raise Refused(f"{where}: a flag of vLLM's, give true or false")
            negative = next((o for o in action.option_strings if o.startswith("--no-")), None)
            argv = [option] if value else [negative] if negative else []
        else:
            argv = [option, _text(value)]
        try:
            typed = getattr(parser.parse_args(argv), key) if argv else False
        except Refused as exc:
            raise Refused(f"{where}: {exc}") from None
        if key == "quantization" and typed is not None:
            from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

            if typed not in QUANTIZATION_METHODS:
                raise Refused(f"{where}: not a quantization method of vLLM {vllm.__version__}"
                              f"{did_you_mean(str(typed), list(QUANTIZATION_METHODS))}")
        out[key] = typed if _jsonable(typed) else value
    return out


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # vLLM's own output goes to stderr
    sys.stdout = sys.stderr
    try:
        import vllm

        given = json.loads(sys.stdin.read())["engine_args"]
        reply = {"ok": True, "engine_args": check(given), "vllm": vllm.__version__}
    except Refused as exc:
        reply = {"ok": False, "error": str(exc)}
    replies.write(json.dumps(reply) + "\n")
    replies.flush()


if __name__ == "__main__":
    main()
