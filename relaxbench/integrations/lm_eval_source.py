"""lm-eval tasks inside ``relaxbench compare``: ``--tasks lm_eval:NAME``.

lm-eval decides what a task is: its documents, its prompts (few-shot examples included, by lm-eval's own rules and
seed), its generation kwargs (stop strings, ``max_gen_toks``, sampling), its filters and its metrics. The harness
decides how it is measured: the arms, warm-up, interleaving, repeats, timing, resumption and the store. The two
meet here: lm-eval builds the requests once (``build_all_requests``); the harness generates each request's answer
arm by arm with its own timing; each answer goes back into a copy of the request (``resps``), through the task's
filters and ``process_results``, and the per-sample metric becomes the sample's score.

Tasks answered by likelihoods (multiple choice, ``loglikelihood``, ``loglikelihood_rolling``) are scored by the
target alone — no verification rule changes a likelihood — so they are computed once, in the AR cell, with the same
code as ``--model relaxbench`` (``RelaxbenchLM.from_models(target, method="none")``); every method scores what AR
scores by definition, and they have no speed figures (see analysis/metrics.py).

Where tasks are looked up (later folders are searched only for names the earlier ones lack): folders given with
``--include-path``, relaxbench's own offline tasks (``tasks/lm_eval``, prepared like ``relaxbench lm-eval-tasks``
does), then lm-eval's built-in tasks (indexing those takes seconds, so it happens only when needed).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.metrics import mean as lm_eval_mean
from lm_eval.api.task import Task
from lm_eval.defaults import DEFAULT_OTHER_SEED
from lm_eval.tasks import TaskManager

from relaxbench.data.items import TaskItem
from relaxbench.errors import ConfigError, DataError, UnknownNameError
from relaxbench.integrations.lm_eval import (
    DEFAULT_MAX_GEN_TOKS,
    GenerationSettings,
    RelaxbenchLM,
    generation_settings,
    render_chat,
)
from relaxbench.integrations.lm_eval_names import PREFIX, SCORER_NAME, TARGET_ALONE
from relaxbench.integrations.lm_eval_tasks import ensure_prepared, shipped_tasks
from relaxbench.registry import did_you_mean
from relaxbench.scoring.base import Score, Scorer, ScoringContext
from relaxbench.tasks.source import Generation, TaskSource

GENERATION = "generate_until"
# dataset builders that read local files; any other dataset_path is a hub data set
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas"})


def bare_name(name: str) -> str:
    bare = name.removeprefix(PREFIX).strip()
    if not bare:
        raise ConfigError(f"{name!r}: name an lm-eval task after 'lm_eval:' (e.g. lm_eval:relaxbench_arith)")
    return bare


class LmEvalTask(TaskSource):
    """One lm-eval task with its requests built, as a compare task source: items, the generation settings of every
    arm, prompts tokenized as ``--model relaxbench`` tokenizes them, scoring of an answer (or of the target's
    likelihoods), and the record that identifies it in the store."""

    scorer_name = SCORER_NAME

    def __init__(self, task: Task, yaml_path: str | None, limit: int | None, chat: ChatTemplate | None = None) -> None:
        self.task = task
        self.chat = chat
        self.task_name: str = task.task_name
        self.name = PREFIX + self.task_name
        self.output_type: str = task.OUTPUT_TYPE
        self.yaml_path = yaml_path
        self._check_supported()
        self.filters: list[str] = [ensemble.name for ensemble in getattr(task, "_filters", [])] or ["none"]
        self.primary = self._primary_metric()
        # with a chat template, few-shot examples become turns of the conversation (lm-eval's default with
        # --apply_chat_template)
        templated = chat is not None
        task.build_all_requests(limit=limit, apply_chat_template=templated, fewshot_as_multiturn=templated,
                                chat_template=chat.render if chat else None,
                                tokenizer_name=chat.tokenizer_name if chat else "")
        self.instances: dict[int, list[Instance]] = {}
        for instance in task.instances:
            self.instances.setdefault(int(instance.doc_id), []).append(instance)
        for group in self.instances.values():
            group.sort(key=lambda inst: inst.idx)
        self.docs: dict[int, dict[str, Any]] = {doc_id: group[0].doc for doc_id, group in self.instances.items()}
        self.settings: GenerationSettings | None = None
        self.ignored_gen_kwargs: tuple[str, ...] = ()
        if self.output_type == GENERATION:
            self.settings = self._generation_settings()
            self.ignored_gen_kwargs = tuple(sorted(self.settings.ignored))
        self.fingerprint = self._fingerprint()
        self.items = tuple(self._items())
        self.likelihood_only = self.output_type in TARGET_ALONE
        self._target_lms: dict[int, RelaxbenchLM] = {}

    # ---------------------------------------------------------------------------------------------- what it is

    def _check_supported(self) -> None:
        if self.output_type != GENERATION and self.output_type not in TARGET_ALONE:
            raise ConfigError(f"{self.name}: output type {self.output_type!r} is not supported by compare")
        if getattr(self.task, "UNSAFE_CODE", False) or getattr(self.task.config, "unsafe_code", False):
            raise ConfigError(f"{self.name} runs generated code inside lm-eval's process (unsafe_code); relaxbench "
                              "runs generated code only in its sandbox: use lm_eval:relaxbench_humaneval")
        repeats = self.task.config.repeats or 1
        if repeats != 1:
            raise ConfigError(f"{self.name} asks for {repeats} generations per document (repeats); compare runs one "
                              "per document and arm (its --repeats re-times the same generation)")

    def _primary_metric(self) -> str:
        """``METRIC,FILTER``: the first metric lm-eval averages per sample (aggregation ``mean``), under the first
        filter. A corpus-level metric (BLEU, perplexity) has no per-sample score to pair across arms."""
        aggregation = self.task.aggregation()
        for metric, function in aggregation.items():
            if function is lm_eval_mean:
                return f"{metric},{self.filters[0]}"
        raise ConfigError(f"{self.name}: none of its metrics ({', '.join(aggregation) or 'none'}) is a per-sample "
                          "mean, which compare needs to pair the arms sample by sample")

    def _generation_settings(self) -> GenerationSettings:
        kwargs = [instance.args[1] for group in self.instances.values() for instance in group]
        if any(k != kwargs[0] for k in kwargs):
            raise ConfigError(f"{self.name}: its documents ask for different generation kwargs, which compare does "
                              "not support (one decoding setting per task and arm)")
        return generation_settings(kwargs[0], DEFAULT_MAX_GEN_TOKS)

    def _fingerprint(self) -> str:
        """A hash of every evaluation document and the few-shot pool (not only the first --limit ones, so raising
        --limit extends a run instead of looking like changed data)."""
        digest = hashlib.sha256()
        for doc in self.task.eval_docs:
            digest.update(json.dumps(doc, sort_keys=True, default=str).encode())
        fewshot = self.task.fewshot_docs() if self.task.config.num_fewshot else None
        for doc in fewshot or ():
            digest.update(b"fewshot" + json.dumps(doc, sort_keys=True, default=str).encode())
        return digest.hexdigest()[:16]

    def lm_eval_record(self) -> dict[str, Any]:
        """What identifies the task in the store: lm-eval's resolved task config (prompts, few-shot settings,
        filters, metrics, generation kwargs), the lm-eval version, and how compare scores it."""
        return {
            "task": self.task_name,
            "output_type": self.output_type,
            "target_alone": self.likelihood_only,
            "primary_metric": self.primary,
            "metric_keys": [f"{metric},{name}" for name in self.filters for metric in self.task.aggregation()],
            "num_fewshot": self.task.config.num_fewshot,
            "fewshot_seed": DEFAULT_OTHER_SEED,
            "apply_chat_template": self.chat is not None,
            "fewshot_as_multiturn": self.chat is not None,
            "ignored_gen_kwargs": list(self.ignored_gen_kwargs),
            "lm_eval_version": version("lm_eval"),
            "config": _plain(self.task.dump_config()),
        }

    def record(self) -> dict[str, Any]:
        """The task record stored with its cells: the shape of a relaxbench task's record (so stores and run keys
        written by earlier versions stay valid), with lm-eval's own record under ``lm_eval``."""
        generation = self.generation()
        return {
            "name": self.name, "format": "lm-eval",
            "source": {"kind": "lm-eval", "path": self.task_name, "name": None, "split": "test", "requirement": "",
                       "member": "", "fields": ()},
            "prompt": "{{ prompt }}", "system": None, "chat": False, "stop": generation.stop,
            "max_new_tokens": generation.max_new_tokens, "scorer": SCORER_NAME, "scorer_args": {},
            "description": str(self.task.config.description or "")[:200], "origin": self.yaml_path or "",
            "lm_eval": self.lm_eval_record(),
        }

    def generation(self) -> Generation:
        settings = self.settings
        if settings is None:  # likelihood-only: nothing is generated
            return Generation(1)
        return Generation(settings.max_new_tokens, settings.stop_strings, settings.sampling)

    def scorer(self) -> Scorer:
        return LmEvalScorer(self)

    def notes(self) -> list[str]:
        out = []
        if self.ignored_gen_kwargs:
            out.append(f"{self.name}: generation kwargs ignored by relaxbench's engine: "
                       f"{', '.join(self.ignored_gen_kwargs)}")
        if self.likelihood_only:
            out.append(f"{self.name}: {self.output_type} task, scored by the target's likelihoods once (in the AR "
                       "cell); every method scores the same by definition")
        return out

    def target_lm(self, target: Any) -> RelaxbenchLM:
        """The target alone behind lm-eval's model interface (``RelaxbenchLM`` with method ``none``): how prompts
        are tokenized and likelihoods computed, the same code as ``--model relaxbench``."""
        if id(target) not in self._target_lms:
            self._target_lms[id(target)] = RelaxbenchLM.from_models(target, method="none")
        return self._target_lms[id(target)]

    def encode(self, target: Any, item: TaskItem, turn: int, history: Sequence[str],
               max_new_tokens: int | None = None) -> list[int]:
        """The request's context, tokenized as ``--model relaxbench`` tokenizes it (the newest tokens kept)."""
        budget = max_new_tokens if max_new_tokens is not None else self.generation().max_new_tokens
        return self.target_lm(target).encode_context(item.turns[0], budget)

    def _items(self) -> list[TaskItem]:
        """One item per document: its id is lm-eval's ``doc_id`` (as in lm-eval's samples files), its one turn the
        request's context (the first request's, for multiple choice)."""
        return [TaskItem(str(doc_id), (str(group[0].args[0]),), fields={"doc_id": doc_id})
                for doc_id, group in self.instances.items()]

    def instances_of(self, item: TaskItem) -> list[Instance]:
        """Fresh copies of the item's requests (the built ones are shared by every arm)."""
        return [replace(instance, resps=[], filtered_resps={}) for instance in self.instances[int(item.item_id)]]

    # ---------------------------------------------------------------------------------------------- scoring

    def score_generation(self, item: TaskItem, text: str) -> Score:
        """Score one generated answer exactly as lm-eval's evaluator would score it."""
        [request] = self.instances_of(item)
        request.resps = [text]
        return self.score_responses(item, [request])

    def score_likelihoods(self, target: Any, item: TaskItem) -> Score:
        """Ask the target alone for the item's likelihood requests, then score them."""
        lm = self.target_lm(target)
        requests = self.instances_of(item)
        method = "loglikelihood_rolling" if self.output_type == "loglikelihood_rolling" else "loglikelihood"
        for request, response in zip(requests, getattr(lm, method)(requests, disable_tqdm=True), strict=True):
            request.resps = [response]
        return self.score_responses(item, requests)

    def score_responses(self, item: TaskItem, requests: list[Instance]) -> Score:
        """Filters, then ``process_results`` once per filter; the primary metric is the score, and every metric
        (``METRIC,FILTER``), each filter's filtered answer and the metrics' directions go into the details."""
        _apply_filters(self.task, requests)
        doc = self.docs[int(item.item_id)]
        higher = self.task.higher_is_better()
        metrics: dict[str, Any] = {}
        filtered: dict[str, Any] = {}
        for name in requests[0].filtered_resps:
            results = [request.filtered_resps[name] for request in requests]
            filtered[name] = results[0] if len(results) == 1 else results
            for metric, value in self.task.process_results(doc, results).items():
                metrics[f"{metric},{name}"] = _plain(value)
        if self.primary not in metrics:
            raise DataError(f"{self.name}: process_results gave no {self.primary!r} for document {item.item_id} "
                            f"(it gave: {', '.join(metrics) or 'nothing'})")
        value = metrics[self.primary]
        if not isinstance(value, (int, float)):  # bools are ints
            raise DataError(f"{self.name}: metric {self.primary!r} of document {item.item_id} is not a number "
                            f"({value!r})")
        number = float(value)
        passed = number == 1.0 if number in (0.0, 1.0) else None
        details = {**metrics, "primary_metric": self.primary, "filtered": _plain(filtered),
                   "higher_is_better": {key: higher.get(key.split(",")[0]) for key in metrics}}
        return Score(number, passed, details)


def _apply_filters(task: Task, requests: list[Instance]) -> None:
    """``task.apply_filters()`` for these requests only. lm-eval's method filters every request of the task at
    once; the harness scores each sample as soon as it exists, so it runs the task's filter ensembles (the same
    objects) on the sample's own requests."""
    ensembles = getattr(task, "_filters", None)
    if not ensembles:
        for request in requests:
            request.filtered_resps["none"] = request.resps[0]
        return
    for ensemble in ensembles:
        ensemble.apply(requests)


def _plain(value: Any) -> Any:
    """JSON-able and stable across processes: functions by qualified name, other objects by type."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # numpy scalars
        return _plain(value.item())
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    return f"<{type(value).__qualname__}>"


@dataclass(frozen=True)
class ChatTemplate:
    """The target's chat template as lm-eval's request builder calls it (``--apply-chat-template``)."""

    tokenizer: Any
    tokenizer_name: str
    template_args: Mapping[str, Any] = field(default_factory=dict)  # the suite's chat_template_args

    def render(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return render_chat(self.tokenizer, chat_history, add_generation_prompt, self.template_args)


class LmEvalScorer(Scorer):
    """The scorer of an ``lm_eval:NAME`` task's generations: lm-eval's filters and metrics (built per task, so it
    is not in the scorer registry)."""

    name = SCORER_NAME
    summary = "lm-eval's filters and process_results; the score is the task's first per-sample metric"

    def __init__(self, task: LmEvalTask) -> None:
        super().__init__()
        self.task = task

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        return self.task.score_generation(item, text)


# -------------------------------------------------------------------------------------------------- loading


def load_lm_eval_tasks(names: Sequence[str], *, include_paths: Sequence[str | Path] = (), limit: int | None = None,
                       num_fewshot: int | None = None, chat: ChatTemplate | None = None) -> dict[str, list[LmEvalTask]]:
    """The lm-eval tasks named ``lm_eval:NAME`` in ``names``, by given name (a group or tag gives each of its
    tasks), with requests built for the first ``limit`` documents (rendered with ``chat`` when given). Errors are
    one line: an unknown name (with a did-you-mean), a hub data set that cannot be reached, a task compare cannot
    pair sample by sample."""
    if num_fewshot is not None and num_fewshot < 0:
        raise ConfigError(f"--num-fewshot must be >= 0, got {num_fewshot}")
    bare = {name: bare_name(name) for name in names if name.startswith(PREFIX)}
    manager = _manager_for(list(bare.values()), [Path(p).expanduser() for p in include_paths])
    out: dict[str, list[LmEvalTask]] = {}
    for given, name in bare.items():
        _check_data_reachable(manager, name)
        try:
            with _datasets_progress_bars_off():
                loaded = manager.load([name])
        except Exception as exc:  # lm-eval and datasets raise many types; any failure here is the task or its data
            raise DataError(f"lm-eval could not load {PREFIX}{name}: {_first_line(exc)}") from None
        out[given] = []
        for task in loaded["tasks"].values():
            _apply_fewshot_rules(task, num_fewshot)
            entry = manager.task_index.get(task.task_name)
            yaml_path = str(entry.yaml_path) if entry and entry.yaml_path else None
            out[given].append(LmEvalTask(task, yaml_path, limit, chat))
    return out


def _manager_for(names: Sequence[str], include_paths: list[Path]) -> TaskManager:
    """A TaskManager that knows every name: the given folders and relaxbench's prepared folder first (quick);
    lm-eval's built-in tasks too when a name is not among those."""
    for path in include_paths:
        if not path.is_dir():
            raise ConfigError(f"--include-path {path}: no such folder")
    shipped = shipped_tasks()
    humaneval = any(shipped[name].humaneval for name in names if name in shipped)
    folders = [str(f) for f in (*include_paths, ensure_prepared(humaneval=humaneval))]
    manager = TaskManager(include_path=folders, include_defaults=False)
    if all(name in manager.task_index for name in names):
        return manager
    manager = TaskManager(include_path=folders, include_defaults=True)
    for name in names:
        if name not in manager.task_index and not Path(name).is_file():
            raise UnknownNameError(f"unknown lm-eval task {PREFIX}{name}{did_you_mean(name, manager.all_tasks)} "
                                   f"({len(manager.all_tasks)} lm-eval tasks, groups and tags are known; "
                                   "add a folder of task YAMLs with --include-path)")
    return manager


@contextmanager
def _datasets_progress_bars_off() -> Iterator[None]:
    """No "Generating test split" bars while lm-eval reads a task's data (they would precede a one-line error);
    the datasets library's setting is restored afterwards."""
    import datasets

    turn_off = datasets.is_progress_bar_enabled()
    if turn_off:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if turn_off:
            datasets.enable_progress_bars()


def _check_data_reachable(manager: TaskManager, name: str) -> None:
    """A task whose data set is on the hub fails within seconds when the hub is unreachable (instead of after the
    hub client's retries), with a line saying what to do."""
    from relaxbench.models.resolve import hub_reachable

    entry = manager.task_index.get(name)
    config = getattr(entry, "cfg", None) or {}
    path = config.get("dataset_path")
    if not isinstance(path, str) or path in LOCAL_BUILDERS or Path(path).expanduser().exists():
        return
    offline = any(os.environ.get(v, "0").lower() in ("1", "true", "yes")
                  for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    if not offline and not hub_reachable(timeout=3.0):
        raise DataError(f"{PREFIX}{name} reads the hub data set {path!r}, and the Hugging Face hub is unreachable; "
                        "point a copy of its YAML at local files (dataset_path: json, dataset_kwargs.data_files) "
                        "and pass its folder with --include-path")


def _apply_fewshot_rules(task: Task, num_fewshot: int | None) -> None:
    """lm-eval's own rules (as ``simple_evaluate`` applies them): --num-fewshot overrides a task's default unless
    the task sets 0; no default means 0; the few-shot sampler gets lm-eval's default seed, so prompts equal those
    of an ``lm_eval`` run."""
    default = task.get_config("num_fewshot")
    if num_fewshot is not None and default != 0:
        task.set_config(key="num_fewshot", value=num_fewshot)
    elif default is None:
        task.set_config(key="num_fewshot", value=0)
    task.set_fewshot_seed(seed=DEFAULT_OTHER_SEED)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
