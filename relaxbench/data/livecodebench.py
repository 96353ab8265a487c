"""LiveCodeBench code generation (``livecodebench/code_generation_lite``) rows as items.

A row's tests are ``public_test_cases`` (JSON) and ``private_test_cases``, which the release stores either as JSON
or as ``base64(zlib(pickle(json_text)))``. The pickle holds a plain string; it is read with an unpickler that
refuses every global (``find_class`` always raises), so a crafted payload cannot run code or build objects. The
item's ``fields`` carry the tests as LiveCodeBench's evaluator takes them: ``inputs``/``outputs`` (public first,
then private) and ``fn_name`` (set for LeetCode's functional problems, None for stdin/stdout problems).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from relaxbench.data.formats import FORMATS, _need
from relaxbench.data.items import TaskItem
from relaxbench.errors import DataError


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def decode_tests(value: Any) -> list[dict[str, Any]]:
    """Test cases from a JSON list, a JSON string, or the compressed private-test encoding."""
    if isinstance(value, list):
        return value
    text = str(value)
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError:
        try:
            raw = zlib.decompress(base64.b64decode(text.encode(), validate=False))
            inner = _NoGlobals(io.BytesIO(raw)).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as exc:
            raise DataError(f"undecodable test cases ({type(exc).__name__}: {exc})") from None
        if not isinstance(inner, (str, bytes)):
            raise DataError(f"the compressed test cases hold a {type(inner).__name__}, not JSON text")
        decoded = json.loads(inner)
    if not isinstance(decoded, list) or not all(isinstance(t, dict) and "input" in t and "output" in t
                                                for t in decoded):
        raise DataError("test cases must be a list of {input, output, testtype}")
    return decoded


@FORMATS.register("livecodebench")
def livecodebench(row: Mapping[str, Any], index: int) -> TaskItem:
    """A raw release row (``question_content``, ``starter_code``, ``public_test_cases``, ``private_test_cases``,
    ``metadata`` with ``func_name``), its tests decoded."""
    _need(row, index, "question_id", "question_content", "public_test_cases", "private_test_cases")
    try:
        tests = decode_tests(row["public_test_cases"]) + decode_tests(row["private_test_cases"])
    except DataError as exc:
        raise DataError(f"row {index + 1} ({row['question_id']}): {exc}") from None
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        metadata = json.loads(metadata or "{}")
    fields = {key: row[key] for key in ("question_title", "question_content", "platform", "question_id",
                                        "contest_id", "contest_date", "difficulty") if key in row}
    fields.update(starter_code=str(row.get("starter_code") or ""), fn_name=metadata.get("func_name"),
                  inputs=[str(t["input"]) for t in tests], outputs=[str(t["output"]) for t in tests],
                  n_public=len(decode_tests(row["public_test_cases"])))
    return TaskItem(str(row["question_id"]), (str(row["question_content"]),), category=row.get("difficulty"),
                    fields=fields)
