"""relaxbench as an lm-evaluation-harness model, registered under the name ``relaxbench``.

    relaxbench lm-eval --model relaxbench --model_args target=NAME,draft=NAME|ngram,method=exact[,k=5,...] ...

``generate_until`` runs every request through relaxbench's one decoding loop with the chosen method (its decoder is
built by ``relaxbench.decoders``, as for every other entry point). ``loglikelihood`` and ``loglikelihood_rolling``
are scored by the target alone: a likelihood is a property of the target that no verification rule changes, so
multiple-choice tasks measure the target whatever the method.

The speculative counters (mean acceptance length, acceptance rate, relaxed fraction, tokens/s, rounds, emitted
tokens) reach lm-eval's own results file through ``get_model_info`` (key ``config.relaxbench``); with
``stats_path=FILE.json`` the summary and every generation request's raw record are written to ``FILE.json`` too.

How lm-eval finds this class: lm-eval 0.4.13 reads no entry points for models. Its registry knows the built-ins
(``lm_eval.models.MODEL_MAPPING``) and whatever an imported module registers, so importing this module registers
``relaxbench`` through lm-eval's ``register_model``; ``relaxbench lm-eval ...`` imports it and then runs lm-eval's
own command line. pyproject.toml also declares the ``lm_eval.models`` entry point, the group lm-eval's plug-in
mechanism reads (added upstream after 0.4.13), with which a plain ``lm_eval --model relaxbench`` needs no import.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import normalize_gen_kwargs, resolve_max_length
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from pydantic import BeforeValidator, Field
from tqdm import tqdm

from relaxbench.decoders import build_decoder, load_pair, resolve_k
from relaxbench.decoding.cache import CachedLM
from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.decoding.records import Counters, GenerationResult
from relaxbench.errors import ConfigError, DataError
from relaxbench.methods import MethodSpec, load_method, with_overrides
from relaxbench.models.device import configure_runtime
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import POLICIES
from relaxbench.registry import did_you_mean
from relaxbench.timing import Clock
from relaxbench.validation import Spec, validate

MODEL_NAME = "relaxbench"
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's default for its own HF model
DRAFTER_KNOB_PREFIX = "drafter."

# lm-eval's logger tree: messages appear in lm-eval's log stream at its level (LMEVAL_LOG_LEVEL)
log = logging.getLogger("lm_eval.relaxbench")


def _as_int(value: Any) -> Any:
    """lm-eval hands model args over as strings or numbers: an integer either way, never a bool or a fraction."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or int(value) != float(value):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {value!r}") from None


OptionalInt = Annotated[int | None, BeforeValidator(_as_int)]
OptionalText = Annotated[str | None, BeforeValidator(lambda v: None if v is None else str(v))]


class ModelArgs(Spec):
    """``--model_args`` of ``--model relaxbench``. Keys that are none of these fields are policy knobs
    (``theta=0.3``); ``drafter.KEY=VALUE`` sets a drafter knob (``drafter.max_ngram=4``).

    The device is lm-eval's own ``--device`` (lm-eval passes it to every model, so it cannot be a model arg)."""

    target: Annotated[str, BeforeValidator(str)]
    method: Annotated[str, BeforeValidator(str)]
    draft: OptionalText = None  # a draft model, 'ngram' (prompt lookup) or 'layerskip'; unused by method=none
    k: OptionalInt = None
    dtype: Annotated[str, BeforeValidator(str)] = "auto"
    draft_dtype: Annotated[str, BeforeValidator(str)] = "auto"
    threads: OptionalInt = None
    seed: Annotated[int, BeforeValidator(_as_int)] = 0
    max_gen_toks: Annotated[int, BeforeValidator(_as_int)] = DEFAULT_MAX_GEN_TOKS
    max_length: OptionalInt = None  # context window; default from the model config
    stats_path: OptionalText = None
    drafter: OptionalText = None  # drafter kind, overriding the method's
    knobs: dict[str, Any] = Field(default_factory=dict)
    drafter_knobs: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def names(cls) -> list[str]:
        """The keys that are model args (everything else is a policy knob or a ``drafter.`` knob)."""
        return sorted(set(cls.model_fields) - {"knobs", "drafter_knobs"})

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ModelArgs:
        named = cls.names()
        values: dict[str, Any] = {"knobs": {}, "drafter_knobs": {}}
        for key, value in raw.items():
            if key in named:
                values[key] = value
            elif key.startswith(DRAFTER_KNOB_PREFIX):
                values["drafter_knobs"][key.removeprefix(DRAFTER_KNOB_PREFIX)] = value
            else:
                values["knobs"][key] = value
        for required, example in (("target", "target=smollm2-135m-instruct"), ("method", "method=exact")):
            if values.get(required) in (None, ""):
                raise ConfigError(f"--model relaxbench needs {example} in --model_args "
                                  f"(model args: {', '.join(named)}; see docs/lm-eval.md)")
        return validate(cls, values, "--model_args", "model arg")


def _resolve_arm(args: ModelArgs) -> tuple[MethodSpec, str | None]:
    """The method and the draft model name it uses (None for the target alone or a drafter without a model)."""
    method = resolve_method(args)
    draft_name = None if method.policy == "none" else args.draft
    if draft_name is None and method.policy != "none" and DRAFTERS.get(method.drafter.kind).needs_draft_model:
        raise ConfigError(f"method {method.name!r} needs a draft: add draft=NAME (a draft model) or draft=ngram "
                          "to --model_args")
    return method, draft_name


def resolve_method(args: ModelArgs) -> MethodSpec:
    """The method named by ``method=`` with the model args' knobs and drafter settings applied (the same rules
    as ``relaxbench generate``, ``methods.with_overrides``)."""
    method = load_method(args.method)
    policy_knobs = set(POLICIES.get(method.policy).Knobs.model_fields)
    for key in args.knobs:
        if key.replace("-", "_") not in policy_knobs:
            known = ModelArgs.names()
            raise ConfigError(
                f"unknown model_args key {key!r}{did_you_mean(key, known + sorted(policy_knobs))} "
                f"(model args: {', '.join(known)}; knobs of rule {method.policy!r}: "
                f"{', '.join(sorted(policy_knobs)) or 'none'}; drafter knobs: drafter.KEY=VALUE)")
    # a knob set in model_args fixes that axis of the method's sweep; lm-eval evaluates exactly one arm
    sweep = {key: values for key, values in method.sweep.items() if key not in args.knobs}
    if sweep:
        key, values = sorted(sweep.items())[0]
        raise ConfigError(f"method {method.name!r} sweeps {', '.join(sorted(sweep))}; lm-eval evaluates one "
                          f"arm, so fix each in model_args (e.g. {key}={values[0]})")
    method = with_overrides(method, args.knobs, args.drafter, args.drafter_knobs, args.draft)
    return method.model_copy(update={"sweep": {}})


@dataclass(frozen=True)
class GenerationSettings:
    """What an lm-eval request's generation kwargs ask of the engine (the draft length ``k`` is the arm's)."""

    max_new_tokens: int
    stop_strings: tuple[str, ...]
    sampling: SamplingParams
    ignored: frozenset[str]  # keys the engine has no use for

    def decode_config(self, k: int, seed: int) -> DecodeConfig:
        return DecodeConfig(k=k, max_new_tokens=self.max_new_tokens, sampling=self.sampling,
                            stop_strings=self.stop_strings, seed=seed)


def generation_settings(gen_kwargs: Mapping[str, Any], default_max_gen_toks: int) -> GenerationSettings:
    """An lm-eval request's generation kwargs, normalised by lm-eval's own helper (so aliases such as
    ``max_new_tokens`` and the do_sample/temperature rules match its other models)."""
    kwargs = dict(normalize_gen_kwargs(dict(gen_kwargs), default_max_gen_toks))
    stops = tuple(s for s in kwargs.pop("until") if s)
    max_new_tokens = int(kwargs.pop("max_gen_toks"))
    sample = bool(kwargs.pop("do_sample", False))
    temperature = float(kwargs.pop("temperature", 0.0))
    temperature = temperature if sample else 0.0  # do_sample=False means greedy, whatever the temperature
    top_k = kwargs.pop("top_k", None)
    top_p = kwargs.pop("top_p", None)
    sampling = SamplingParams(temperature, int(top_k or 0), 1.0 if top_p is None else float(top_p))
    return GenerationSettings(max_new_tokens, stops, sampling, frozenset(kwargs))


def decode_config_from_gen_kwargs(gen_kwargs: Mapping[str, Any], *, k: int, default_max_gen_toks: int,
                                  max_length: int, seed: int) -> tuple[DecodeConfig, set[str]]:
    """An lm-eval request's generation kwargs as a relaxbench DecodeConfig, with the keys the engine has no use
    for."""
    settings = generation_settings(gen_kwargs, default_max_gen_toks)
    check_room(settings.max_new_tokens, max_length)
    return settings.decode_config(k, seed), set(settings.ignored)


def check_room(max_new_tokens: int, max_length: int) -> None:
    if max_new_tokens >= max_length:
        raise ConfigError(f"max_gen_toks={max_new_tokens} leaves no room for a prompt in max_length {max_length}")


def render_chat(tokenizer: Any, chat_history: list[dict[str, str]], add_generation_prompt: bool = True,
                template_args: Mapping[str, Any] | None = None) -> str:
    """lm-eval's chat-template hook: the conversation as the tokenizer's chat template renders it (a prompt ending
    in an assistant prefix is continued rather than closed), with the suite's ``chat_template_args``."""
    return tokenizer.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         continue_final_message=not add_generation_prompt,
                                         **dict(template_args or {}))


@dataclass
class RunStats:
    """The speculative counters of one lm-eval run: every generation request's raw record, and a summary that
    is derived from those records only."""

    arm: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    loglikelihood_requests: int = 0
    loglikelihood_seconds: float = 0.0

    def add_generation(self, request: Any, result: GenerationResult, seed: int) -> None:
        self.records.append({
            "task": request.task_name,
            "doc_id": request.doc_id,
            "request_index": request.idx,
            "seed": seed,
            "n_prompt_tokens": len(result.prompt_ids),
            "n_emitted": result.n_emitted,
            "n_rounds": result.n_rounds,
            "mean_acceptance_length": result.counters.mean_acceptance_length,
            "acceptance_rate": result.counters.acceptance_rate,
            "tokens_per_second": result.tokens_per_second,
            **result.to_record(),
        })

    def counters(self) -> Counters:
        """The counters of every generation request, summed (rebuilt from the raw records)."""
        return sum((Counters.of_rounds(r["rounds"]["drafted"], r["rounds"]["accepted"], r["rounds"]["relaxed"],
                                       r["n_emitted"]) for r in self.records), Counters())

    def summary(self) -> dict[str, Any]:
        """Totals over all generation requests, with the ratios ``Counters`` defines for every relaxbench figure:
        mean acceptance length = emitted / rounds (bonus included; 1.0 for the target alone); acceptance rate =
        accepted / drafted; relaxed fraction = relaxed / emitted (the share of the output that exact verification
        would not have let through; the same definition as ``relaxbench compare`` and the report); tokens/s =
        emitted / generation time."""
        counters = self.counters()
        seconds = sum(r["time_total"] for r in self.records)
        return {
            **self.arm,
            "generate_requests": len(self.records),
            "emitted_tokens": counters.emitted,
            "rounds": counters.rounds,
            "drafted_tokens": counters.drafted,
            "accepted_tokens": counters.accepted,
            "relaxed_tokens": counters.relaxed,
            "accepted_per_position": list(counters.accepted_per_position),
            "mean_acceptance_length": counters.mean_acceptance_length,
            "acceptance_rate": counters.acceptance_rate,
            "relaxed_fraction": counters.relaxed_fraction,
            "generation_seconds": seconds,
            "prefill_seconds": sum(r["time_prefill"] for r in self.records),
            "tokens_per_second": counters.emitted / seconds if seconds > 0 else None,
            "stop_reasons": {reason: sum(1 for r in self.records if r["stop_reason"] == reason)
                             for reason in sorted({r["stop_reason"] for r in self.records})},
            "loglikelihood_requests": self.loglikelihood_requests,
            "loglikelihood_seconds": self.loglikelihood_seconds,
        }

    def write(self, path: Path) -> None:
        """Summary and records as one JSON file, replaced atomically (a reader never sees half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(json.dumps({"summary": self.summary(), "requests": self.records}, indent=1))
        tmp.replace(path)


class RelaxbenchLM(TemplateLM):
    """One relaxbench method at one setting of its knobs (a target, a drafter and a verification rule, built into one
    decoder) behind lm-eval's ``LM`` interface.

    Requests are decoded one at a time (the engine decodes a single sequence; batching would change the timing
    being measured), so ``--batch_size`` other than 1 is ignored with a warning. ``device``, ``batch_size``,
    ``max_batch_size`` and ``trust_remote_code`` are what lm-eval itself passes to every model.
    """

    backend = "causal"

    def __init__(self, device: str | None = None, batch_size: int | str | None = 1, max_batch_size: int | None = None,
                 trust_remote_code: bool | None = None, **model_args: Any) -> None:
        super().__init__()
        if device and device.startswith("cuda") and not torch.cuda.is_available():
            # lm-eval's default --device is cuda:0 even on machines without one (its HF model falls back too)
            log.info("relaxbench: --device %s but torch sees no CUDA device; using cpu", device)
            device = "cpu"
        if batch_size not in (None, 1, "1"):
            log.warning("relaxbench decodes one request at a time; ignoring batch_size=%s", batch_size)
        args = ModelArgs.parse(model_args)
        method, draft_name = _resolve_arm(args)
        device = configure_runtime(device or "auto", args.threads)
        target, draft = load_pair(args.target, draft_name, device, args.dtype, args.draft_dtype, quiet=True)
        self._setup(args, method, draft_name, target, draft)
        log.info("relaxbench arm: %s", json.dumps(self.stats.arm))

    @classmethod
    def from_models(cls, target: Any, draft: Any | None = None, **model_args: Any) -> RelaxbenchLM:
        """An instance over models that are already loaded (``relaxbench compare`` scores lm-eval tasks with the
        target alone through ``from_models(target, method="none")``). ``target=`` is taken from ``target``."""
        lm = cls.__new__(cls)
        TemplateLM.__init__(lm)
        args = ModelArgs.parse({**model_args, "target": target.name})
        method, draft_name = _resolve_arm(args)
        lm._setup(args, method, draft_name, target, draft)
        return lm

    def _setup(self, args: ModelArgs, method: MethodSpec, draft_name: str | None, target: Any,
               draft: Any | None) -> None:
        self.args, self.method, self.draft_name = args, method, draft_name
        self.target, self.draft = target, draft
        self.k = resolve_k(method, args.k)
        # configuration errors (a rule that needs draft probabilities with an n-gram drafter, ...) surface now,
        # not after lm-eval has built every request
        probe = self._probe_sampling()
        self._probe = build_decoder(method, self.target, self.draft, DecodeConfig(k=self.k, sampling=probe), draft_name)
        self.tokenizer = self.target.tokenizer
        self._device = self.target.device
        self._scoring_lm = CachedLM(self.target.model)  # the target alone, for likelihoods
        self._clock = Clock(self.target.device)
        self._ignored_gen_kwargs: set[str] = set()
        self.stats = RunStats(arm=self._describe_arm())

    # -- what lm-eval asks of a model -------------------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        return eos if eos is not None else min(self.target.eos_token_ids)

    @property
    def prefix_token_id(self) -> int:
        """What an empty context is conditioned on: BOS when the tokenizer has one, else EOS (as lm-eval's HF
        model does, so scores are comparable)."""
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        if self.args.max_length:
            return self.args.max_length
        return resolve_max_length(self.target.model.config, self.tokenizer)

    @property
    def max_gen_toks(self) -> int:
        return self.args.max_gen_toks

    @property
    def tokenizer_name(self) -> str:
        return self.target.name.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Token ids of ``string``; by default the tokenizer's own special-token rule, except that a string that
        already starts with the prefix token (a chat-templated prompt) gets no second one."""
        options = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        if add_special_tokens is None and string.startswith(self.tokenizer.decode([self.prefix_token_id])):
            options = {"add_special_tokens": False}
        return list(self.tokenizer.encode(string, **options))

    def encode_context(self, context: str, max_new_tokens: int) -> list[int]:
        """The prompt ids of a generation request: the newest tokens of ``context`` that leave room for
        ``max_new_tokens`` within ``max_length``; an empty context is the prefix token alone."""
        check_room(max_new_tokens, self.max_length)
        return self.tok_encode(context)[-(self.max_length - max_new_tokens):] or [self.prefix_token_id]

    def tok_decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return render_chat(self.tokenizer, chat_history, add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        """lm-eval merges this into ``results["config"]``: the counters land in its results file. Called once,
        after evaluation, so it also writes the final ``stats_path`` file."""
        self._write_stats()
        return {MODEL_NAME: self.stats.summary()}

    # -- likelihoods: the target alone ------------------------------------------------------------------------------
    @torch.inference_mode()
    def _loglikelihood_tokens(self, requests: list[tuple[tuple[str, str] | None, list[int], list[int]]],
                              disable_tqdm: bool = False, **_: Any) -> list[tuple[float, bool]]:
        start = self._clock.now()
        results = []
        for cache_key, context_ids, continuation_ids in tqdm(requests, disable=disable_tqdm,
                                                             desc="relaxbench loglikelihood (target)"):
            result = self._score(context_ids, continuation_ids)
            if cache_key is not None:
                self.cache_hook.add_partial("loglikelihood", cache_key, result)
            results.append(result)
        self.stats.loglikelihood_requests += len(requests)
        self.stats.loglikelihood_seconds += self._clock.now() - start
        return results

    @torch.inference_mode()
    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of whole strings, in disjoint windows of at most ``max_length`` tokens (lm-eval's own
        windowing, so perplexities match its other models)."""
        start = self._clock.now()
        totals = []
        for (string,) in tqdm([r.args for r in requests], disable=disable_tqdm,
                              desc="relaxbench loglikelihood_rolling (target)"):
            windows = get_rolling_token_windows(token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                                                max_seq_len=self.max_length, context_len=1)
            total = sum(self._score(*make_disjoint_window(window))[0] for window in windows)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
            totals.append(total)
        self.stats.loglikelihood_requests += len(requests)
        self.stats.loglikelihood_seconds += self._clock.now() - start
        return totals

    def _score(self, context_ids: list[int], continuation_ids: list[int]) -> tuple[float, bool]:
        """log p(continuation | context) under the target, and whether greedy decoding would produce the
        continuation. At most ``max_length`` tokens are fed (the oldest context tokens are dropped).

        The target's KV cache keeps the longest prefix shared with the previous request (the choices of a
        multiple-choice question share their context), but never a position whose logits are needed now."""
        n = len(continuation_ids)
        if n == 0 or n > self.max_length:
            raise DataError(f"cannot score a continuation of {n} tokens with max_length {self.max_length}")
        whole = (list(context_ids) + list(continuation_ids))[-(self.max_length + 1):]
        inputs = torch.tensor(whole[:-1], dtype=torch.long, device=self._device)
        first_scored = inputs.shape[0] - n
        lm = self._scoring_lm
        lm.sync_to(inputs[: first_scored + 1])
        logits = lm.run(inputs[lm.length:], n_logits=n).logits
        targets = torch.tensor(continuation_ids, dtype=torch.long, device=self._device)
        logprob = torch.log_softmax(logits.double(), dim=-1).gather(-1, targets[:, None]).sum()
        return float(logprob), bool((logits.argmax(dim=-1) == targets).all())

    # -- generation: the relaxbench engine ---------------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        outputs = []
        for index, request in enumerate(tqdm(requests, disable=disable_tqdm,
                                             desc=f"relaxbench generate_until ({self.method.name})")):
            context, gen_kwargs = request.args
            seed = self.args.seed + index  # distinct per request, so repeats of a sampled task differ
            decode = self._decode_config(gen_kwargs, seed)
            prompt_ids = self.encode_context(context, decode.max_new_tokens)
            decoder = build_decoder(self.method, self.target, self.draft, decode, self.draft_name)
            result = decoder.generate(prompt_ids)
            self.stats.add_generation(request, result, seed)
            self.cache_hook.add_partial("generate_until", request.args, result.text)
            outputs.append(result.text)
        self._write_stats()
        summary = self.stats.summary()
        log.info("relaxbench %s: %d requests, %d tokens in %d rounds, mean acceptance length %s, acceptance rate %s, "
                 "relaxed fraction %s, %s tokens/s", self.method.name, summary["generate_requests"],
                 summary["emitted_tokens"], summary["rounds"], _fmt(summary["mean_acceptance_length"]),
                 _fmt(summary["acceptance_rate"]), _fmt(summary["relaxed_fraction"]),
                 _fmt(summary["tokens_per_second"]))
        return outputs

    def _decode_config(self, gen_kwargs: Mapping[str, Any], seed: int) -> DecodeConfig:
        decode, ignored = decode_config_from_gen_kwargs(gen_kwargs, k=self.k, default_max_gen_toks=self.max_gen_toks,
                                                        max_length=self.max_length, seed=seed)
        if ignored - self._ignored_gen_kwargs:
            log.warning("relaxbench ignores the generation kwargs %s", ", ".join(sorted(ignored)))
            self._ignored_gen_kwargs |= ignored
        return decode

    # -- bookkeeping -------------------------------------------------------------------------------------------------
    def _probe_sampling(self) -> SamplingParams:
        greedy_ok = "greedy" in POLICIES.get(self.method.policy).modes.supported
        return SamplingParams() if greedy_ok else SamplingParams(temperature=1.0)

    def _describe_arm(self) -> dict[str, Any]:
        drafter = self._probe.drafter
        return {
            "method": self.method.name,
            "policy": self._probe.policy.describe(),
            "drafter": drafter.describe() if drafter is not None else None,
            "k": self.k if drafter is not None else 0,
            "target": self.target.describe(),
            "draft": self.draft.describe() if self.draft is not None else self.draft_name,
            "seed": self.args.seed,
            "threads": torch.get_num_threads(),
            "stats_path": str(Path(self.args.stats_path).resolve()) if self.args.stats_path else None,
        }

    def _write_stats(self) -> None:
        if self.args.stats_path:
            self.stats.write(Path(self.args.stats_path))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def register() -> None:
    """Register ``relaxbench`` in lm-eval's model registry, unless it is there already (a plug-in-aware lm-eval
    holds our entry point; importing this module while that entry point loads must not register twice).

    lm-eval imports its built-in model table only when its registry is empty, so it is imported first: adding our
    name to an empty registry would hide ``hf`` and the others."""
    import lm_eval.models  # noqa: F401  (registers the built-in models)
    from lm_eval.api.registry import model_registry, register_model

    if MODEL_NAME not in model_registry:
        register_model(MODEL_NAME)(RelaxbenchLM)


register()
