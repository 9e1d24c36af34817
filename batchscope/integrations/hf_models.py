"""``diagnose hf:MODEL_ID_OR_PATH --task TASK``: a Hugging Face model with no model file.

The model is built from its config, with random weights unless the weights are already on
this machine (a folder with ``model.safetensors`` or ``pytorch_model.bin``, or the local
Hugging Face cache): nothing is downloaded. The parent writes a model file for the task
(:func:`model_file_source`) into the report's folder and sweeps it as any other, so the
whole pipeline (counting, the roofline, the context grid, data-parallel ranks) applies, and
the user can read, rerun or edit the file. Only the worker builds the model; the parent
reads the config with transformers' ``AutoConfig`` (no model, no weights) to check the task
and the lengths against it before any sweep (:func:`check_config`): a context or sequence
longer than the config's position window, or a task its architecture has no class for, is
one sentence and exit 4, not a sweep that ends in an ``IndexError``.

Tasks, and what one row of a batch is:

- ``causal-lm-decode``: one new token per sequence over a KV cache of ``--context`` tokens
  (Hugging Face's DynamicCache, as ``generate()`` uses: each step concatenates the new
  token's keys and values onto the cache); UNIT token, and CONTEXTS for the serving what-if.
  The default context is 1024 tokens where the config's window leaves room after it for
  the tokens the serving what-if decodes (:func:`default_context`), else less.
- ``causal-lm-prefill``: a prompt of ``--seq-len`` tokens, its forward filling a fresh KV
  cache (as an engine's prefill does); UNIT token, ``--seq-len`` of them per row
  (UNITS_PER_ROW).
- ``causal-lm-train``: next-token loss on ``--seq-len`` tokens; training, in tokens.
- ``seq-cls``: sequence classification of ``--seq-len`` tokens; UNIT sequence.
- ``image-cls``: image classification at the config's image size; UNIT image.
- ``seq2seq-train``: an encoder-decoder (T5) with ``--seq-len`` input and a quarter as many
  label tokens; training.

Token ids a bare config may leave unset are filled as transformers' own code falls back
(:func:`fallback_token_ids`): the decoder's start token of a seq2seq model (a ``T5Config()``
has none in transformers 5), and the padding token a sequence classifier needs to batch
more than one row (a ``GPT2Config()`` has none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchscope.errors import UsageError
from batchscope.serving.whatif import DEFAULT_OUTPUT

PREFIX = "hf:"
TASKS = {
    "causal-lm-decode": ("AutoModelForCausalLM", "token", "inference"),
    "causal-lm-prefill": ("AutoModelForCausalLM", "token", "inference"),
    "causal-lm-train": ("AutoModelForCausalLM", "token", "train"),
    "seq-cls": ("AutoModelForSequenceClassification", "sequence", "inference"),
    "image-cls": ("AutoModelForImageClassification", "image", "inference"),
    "seq2seq-train": ("AutoModelForSeq2SeqLM", "sequence", "train"),
}
DEFAULT_SEQ_LEN = 128
DEFAULT_CONTEXT = 1024
# The report of a decode sweep simulates serving with requests that decode up to this many
# tokens after a prompt of the sweep's context (``diagnose serve``'s default --output-tokens):
# the default context leaves them room in the config's window.
DECODE_ROOM_TOKENS = DEFAULT_OUTPUT.high
# The config attributes that bound the positions a model embeds, in the order looked up
# (``max_position_embeddings`` is GPT-2's ``n_positions`` through its attribute map).
WINDOW_FIELDS = ("max_position_embeddings", "n_positions")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
GENERATED_NAME = "hf_model.py"


def is_hf_target(target: str) -> bool:
    return target.startswith(PREFIX)


@dataclass
class HfSource:
    """Where the config (and any weights) of ``hf:SOURCE`` are on this machine."""

    source: str
    config_path: Path
    has_weights: bool


def resolve(target: str) -> HfSource:
    """Find ``hf:SOURCE``'s config locally, without importing torch or transformers.

    Raises:
        UsageError: no such folder or cached model, or transformers is not installed.
    """
    source = target[len(PREFIX):]
    if not source:
        raise UsageError("hf: needs a model id or a folder, e.g. hf:gpt2 or hf:./my-model.")
    folder = Path(source).expanduser()
    if folder.is_dir():
        config = folder / "config.json"
        if not config.is_file():
            raise UsageError(f"{target}: the folder {folder} has no config.json.")
        return HfSource(str(folder.resolve()), config,
                        any((folder / name).is_file() for name in WEIGHT_FILES))
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        raise UsageError(f"{target} needs transformers: pip install transformers.") from None
    cached = try_to_load_from_cache(source, "config.json")
    if not isinstance(cached, str):
        raise UsageError(
            f"{target}: no config.json for {source!r} on this machine, and nothing is "
            f"downloaded at run time; fetch it first ({download_command(source)}) or pass "
            "a folder that has it.")
    weights = any(isinstance(try_to_load_from_cache(source, name), str) for name in WEIGHT_FILES)
    return HfSource(source, Path(cached), weights)


# The command-line tools huggingface_hub has shipped, newest first: ``hf`` since 0.34 (the
# only one in 1.x and later), ``huggingface-cli`` before (deprecated in 0.34, gone in 1.0).
HUB_COMMANDS = ("hf", "huggingface-cli")


def hub_command() -> str:
    """The download command the installed huggingface_hub ships: its console scripts as
    its distribution declares them (``hf`` where none can be read)."""
    from importlib import metadata

    try:
        scripts = {e.name for e in metadata.distribution("huggingface_hub").entry_points
                   if e.group == "console_scripts"}
    except metadata.PackageNotFoundError:
        scripts = set()
    return next((name for name in HUB_COMMANDS if name in scripts), HUB_COMMANDS[0])


def download_command(source: str) -> str:
    """The command that fetches ``source``'s config.json with the installed hub's own tool.

    Example:
        >>> download_command("gpt2") in ("hf download gpt2 config.json",
        ...                              "huggingface-cli download gpt2 config.json")
        True
    """
    return f"{hub_command()} download {source} config.json"


def load_config(target: str, found: HfSource) -> Any:
    """``found``'s config as transformers reads it, with the class's defaults and attribute
    maps (a config.json may leave out the fields at their defaults): the one the worker builds
    the model from. Only for hf: targets: transformers (5.x imports torch with it) is
    imported here, but no model is built.

    Raises:
        UsageError: transformers is not installed, or cannot read the config.
    """
    try:
        import transformers
    except ImportError:
        raise UsageError(f"{target} needs transformers: pip install 'batchscope[hf]'.") from None
    try:
        return transformers.AutoConfig.from_pretrained(found.source, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # transformers' own messages run to several lines: its first says what is wrong.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
        raise UsageError(f"{target}: transformers cannot read {found.config_path}: "
                         f"{first}.") from None


@dataclass(frozen=True)
class PositionWindow:
    """The positions a model embeds: token positions 0 to ``tokens`` - 1, as the config's
    ``field`` (its name in config.json) says."""

    tokens: int
    field: str


def position_window(config: Any) -> PositionWindow | None:
    """The config's position window; None where it sets none (T5's relative positions,
    ALiBi): any length is the model's."""
    for name in WINDOW_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            aliases = getattr(type(config), "attribute_map", None) or {}
            return PositionWindow(value, str(aliases.get(name, name)))
    return None


def default_context(window: PositionWindow | None) -> int:
    """The decode context when ``--context`` is not given: :data:`DEFAULT_CONTEXT` where the
    window holds it and the :data:`DECODE_ROOM_TOKENS` decoded after it (GPT-2's 1024
    positions: 768), else half the window, so that a short window still has room to decode
    in."""
    if window is None:
        return DEFAULT_CONTEXT
    room = window.tokens - DECODE_ROOM_TOKENS
    return min(DEFAULT_CONTEXT, room if room >= window.tokens // 2 else window.tokens // 2)


def _first_id(value: Any) -> int | None:
    """A token id as configs hold it (an int, or a list whose first is the main one)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fallback_token_ids(task: str, config: Any, generation_config: Any = None
                       ) -> dict[str, int]:
    """Token ids ``task``'s forward reads that ``config`` leaves unset, as transformers' own
    code falls back for them (empty: none missing, or none to fall back on).

    - ``decoder_start_token_id`` (seq2seq training shifts the labels right behind it): the
      generation config's, else the ``bos_token_id`` (as ``generate()`` falls back), else
      the ``pad_token_id`` (what T5 starts its decoder with, as its error message says).
    - ``pad_token_id`` (a sequence classifier finds each row's last token by it, and refuses
      more than one row without it): the ``eos_token_id``, as transformers' docs set it for
      GPT-2 and its pipelines do for generation.
    """
    filled: dict[str, int] = {}
    if task == "seq2seq-train" and _first_id(getattr(config, "decoder_start_token_id",
                                                     None)) is None:
        for source, name in ((generation_config, "decoder_start_token_id"),
                             (config, "bos_token_id"), (config, "pad_token_id")):
            token = _first_id(getattr(source, name, None))
            if token is not None:
                filled["decoder_start_token_id"] = token
                break
    if task == "seq-cls" and _first_id(getattr(config, "pad_token_id", None)) is None:
        token = _first_id(getattr(config, "eos_token_id", None))
        if token is not None:
            filled["pad_token_id"] = token
    return filled


def _tasks_for(config: Any) -> list[str] | None:
    """The tasks whose auto class transformers has for ``config``'s architecture; None where
    its mappings cannot be read (a transformers that moved them): the worker says then."""
    import transformers

    tasks = []
    for name, (auto, _, _) in TASKS.items():
        mapping = getattr(getattr(transformers, auto, None), "_model_mapping", None)
        if mapping is None:
            return None
        if type(config) in mapping:
            tasks.append(name)
    return tasks


def check_config(target: str, task: str, config: Any, *, context: int | None,
                 seq_lens: list[int], contexts: list[int] | None = None) -> int:
    """Check ``task`` and its lengths against ``config`` before any sweep; the decode
    context (``context``, or :func:`default_context` where it is None).

    ``seq_lens`` are the row lengths of a sequence task (``--seq-lens``, else
    ``[--seq-len]``); ``contexts`` a decode sweep's ``--contexts`` (each must fit as
    ``context`` must).

    Raises:
        UsageError: one sentence naming the config's field: the architecture has no class
            for ``task`` (``model_type``), a length outside its position window, or a token
            id the task needs that the config does not give.
    """
    auto = TASKS[task][0]
    model_type = getattr(config, "model_type", "") or "?"
    tasks = _tasks_for(config)
    if tasks is not None and task not in tasks:
        can = f"it can do {', '.join(tasks)}" if tasks else "it can do none of the tasks"
        raise UsageError(f"{target} is a {model_type!r} model (model_type in its config.json) "
                         f"and transformers has no {auto} for it, so --task {task} cannot run; "
                         f"{can}.")
    window = position_window(config)
    if task == "causal-lm-decode":
        if window is not None and window.tokens < 2:
            raise UsageError(f"{target}: its config's {window.field} is {window.tokens}: no "
                             "room for a context and a token decoded after it.")
        chosen = default_context(window) if context is None else context
        if window is not None and chosen >= window.tokens:
            raise UsageError(f"--context {chosen} does not fit {target}: its config's "
                             f"{window.field} is {window.tokens}, and a decode step puts its "
                             f"new token at position {chosen}; use --context "
                             f"{window.tokens - 1} or less.")
        for n in contexts or []:
            if window is not None and n >= window.tokens:
                raise UsageError(f"--contexts {n} does not fit {target}: its config's "
                                 f"{window.field} is {window.tokens}, and a decode step puts "
                                 f"its new token at position {n}; use contexts of "
                                 f"{window.tokens - 1} or fewer tokens.")
        return chosen
    if task != "image-cls" and window is not None:
        over = [n for n in seq_lens if n > window.tokens]
        if over:
            option = "--seq-lens" if len(seq_lens) > 1 else "--seq-len"
            raise UsageError(f"{option} {over[0]} does not fit {target}: its config's "
                             f"{window.field} is {window.tokens}; use rows of "
                             f"{window.tokens} tokens or fewer.")
    if task == "seq2seq-train":
        _check_decoder_start(target, config)
    if task == "seq-cls" and _first_id(getattr(config, "pad_token_id", None)) is None \
            and not fallback_token_ids(task, config):
        raise UsageError(f"{target}: its config sets neither pad_token_id nor eos_token_id, "
                         "and a sequence classifier needs a padding token to batch more "
                         "than one row; set pad_token_id in its config.json.")
    return DEFAULT_CONTEXT if context is None else context


def _check_decoder_start(target: str, config: Any) -> None:
    """Raises UsageError where neither the config, its generation config nor a fallback
    gives the token the decoder starts from."""
    if _first_id(getattr(config, "decoder_start_token_id", None)) is not None:
        return
    import transformers

    try:
        generation = transformers.GenerationConfig.from_pretrained(
            config.name_or_path or "", local_files_only=True)
    except (OSError, ValueError, TypeError):  # no generation_config.json: the config alone
        generation = None
    if not fallback_token_ids("seq2seq-train", config, generation):
        raise UsageError(f"{target}: its config sets none of decoder_start_token_id, "
                         "bos_token_id and pad_token_id, and seq2seq training starts the "
                         "decoder from one of them; set decoder_start_token_id in its "
                         "config.json.")


def model_file_source(target: str, task: str, *, context: int | None, seq_len: int,
                      seq_lens: list[int] | None = None,
                      contexts: list[int] | None = None) -> str:
    """The text of the model file that sweeps ``target`` for ``task`` (with ``seq_lens``:
    over batch size × sequence length, SEQ_LENS).

    Raises:
        UsageError: an unknown task, or a config the task cannot use.
    """
    if task not in TASKS:
        raise UsageError(f"unknown --task {task!r}; use one of {', '.join(TASKS)}.")
    if seq_len < 1:
        raise UsageError(f"--seq-len must be at least 1, not {seq_len}.")
    if seq_lens and task in ("causal-lm-decode", "image-cls"):
        raise UsageError(f"--seq-lens goes with tasks whose rows are sequences, not {task}"
                         + (" (its second axis is --contexts)." if task == "causal-lm-decode"
                            else "."))
    if context is not None and context < 0:
        raise UsageError(f"--context must be a token count from 0 up, not {context}.")
    found = resolve(target)
    try:
        model_type = json.loads(found.config_path.read_text()).get("model_type", "?")
    except (OSError, ValueError):
        raise UsageError(f"{target}: {found.config_path} is not a JSON config.") from None
    auto, unit, mode = TASKS[task]
    weights = ("the local weights" if found.has_weights
               else "random weights (built from the config; nothing downloaded)")
    context = check_config(target, task, load_config(target, found), context=context,
                           seq_lens=seq_lens or [seq_len], contexts=contexts)
    about = (f"Written by batchscope for `diagnose {target} --task {task}`: a {model_type} "
             f"model, {auto}, with {weights}. Rerun it with `diagnose` or edit it.")
    lines = [
        repr(about),  # a literal whatever the path holds: the file's docstring
        "from batchscope.integrations.hf_models import HfTask",
        "",
        f"_task = HfTask({found.source!r}, {task!r}, weights={found.has_weights!r}, "
        f"seq_len={seq_len!r}, context={context!r})",
        "build_model = _task.build_model",
        "make_inputs = _task.make_inputs",
        "run = _task.run",
        f"UNIT = {unit!r}",
        f"MODE = {mode!r}",
    ]
    if seq_lens:
        lines.append(f"SEQ_LENS = {list(seq_lens)!r}  # make_inputs(batch_size, seq_len)")
    if unit == "token" and task != "causal-lm-decode":
        lines.append('UNITS_PER_ROW = "seq_len"  # a row is its sequence length in tokens: '
                     'tokens/s' if seq_lens else
                     f"UNITS_PER_ROW = {seq_len}  # a row is {seq_len} tokens: tokens/s")
    if mode == "train":
        lines.append("loss = _task.loss")
    if task == "causal-lm-decode":
        lines.append(f"CONTEXTS = [{context}]")
        # The model a real engine serves: diagnose serve --engine and its prefill timing.
        lines.append("build_engine_model = _task.build_model")
    return "\n".join(lines) + "\n"


def write_model_file(target: str, task: str, out_dir: str | Path, *, context: int | None,
                     seq_len: int, seq_lens: list[int] | None = None,
                     contexts: list[int] | None = None) -> Path:
    """Write the model file for ``target`` and ``task`` into ``out_dir``; its path.

    Raises:
        UsageError: as :func:`model_file_source`, or the folder cannot be written.
    """
    text = model_file_source(target, task, context=context, seq_len=seq_len, seq_lens=seq_lens,
                             contexts=contexts)
    path = Path(out_dir) / GENERATED_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}.") from None
    return path


class HfTask:
    """The contract's functions for one Hugging Face model and task (in the worker)."""

    def __init__(self, source: str, task: str, *, weights: bool, seq_len: int,
                 context: int) -> None:
        self.source, self.task, self.weights = source, task, weights
        self.seq_len, self.context = seq_len, context
        self.config: Any = None

    def build_model(self) -> Any:
        import torch
        import transformers

        auto = getattr(transformers, TASKS[self.task][0])
        local = {"local_files_only": True}
        self.config = transformers.AutoConfig.from_pretrained(self.source, **local)
        torch.manual_seed(0)
        if self.weights:
            model = auto.from_pretrained(self.source, **local)
        else:
            model = auto.from_config(self.config)
        # The model's own config (from_config may copy it) is the one its forward reads.
        for name, token in fallback_token_ids(self.task, model.config,
                                              getattr(model, "generation_config", None)).items():
            setattr(model.config, name, token)
        return model

    def _ids(self, batch_size: int, length: int, seed: int) -> Any:
        import torch

        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, int(self.config.vocab_size), (batch_size, length),
                             generator=generator)

    def make_inputs(self, batch_size: int, length: int | None = None) -> Any:
        """The task's inputs; ``length`` is the decode context (CONTEXTS) or the row's
        sequence length (SEQ_LENS), None: the task's own."""
        import torch

        if self.task == "image-cls":
            size = int(self.config.image_size)
            channels = int(getattr(self.config, "num_channels", 3))
            return {"pixel_values": torch.randn(batch_size, channels, size, size)}
        if self.task == "causal-lm-decode":
            return self._decode_inputs(batch_size, length or self.context)
        seq_len = length or self.seq_len
        inputs = {"input_ids": self._ids(batch_size, seq_len, batch_size)}
        if self.task == "causal-lm-train":
            inputs["labels"] = inputs["input_ids"]
        elif self.task == "seq2seq-train":
            inputs["labels"] = self._ids(batch_size, max(1, seq_len // 4), batch_size + 1)
        return inputs

    def _decode_inputs(self, batch_size: int, context: int) -> dict[str, Any]:
        """One new token per row, a KV cache of ``context`` tokens per layer (each row its
        own memory: the cache is state, not shared), positions after it."""
        import torch

        shapes = self._cache_shapes()
        generator = torch.Generator().manual_seed(batch_size)
        kv = []
        for heads, head_dim in shapes:
            row = torch.randn(1, heads, context, head_dim, generator=generator) * 0.1
            kv.append([row.repeat(batch_size, 1, 1, 1), row.repeat(batch_size, 1, 1, 1)])
        return {"input_ids": self._ids(batch_size, 1, batch_size),
                "position_ids": torch.full((batch_size, 1), context, dtype=torch.long),
                "kv": kv}

    def _cache_shapes(self) -> list[tuple[int, int]]:
        """(key-value heads, head dim) of each layer's cache, from the config: grouped-query
        layouts (``num_key_value_heads``) and an explicit ``head_dim`` taken as given."""
        config = self.config
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        return [(kv_heads, head_dim)] * int(config.num_hidden_layers)

    def run(self, model: Any, inputs: dict[str, Any]) -> Any:
        if self.task == "causal-lm-decode":
            from transformers import DynamicCache

            cache = DynamicCache()
            for i, (keys, values) in enumerate(inputs["kv"]):
                cache.update(keys, values, i)
            return model(input_ids=inputs["input_ids"], position_ids=inputs["position_ids"],
                         use_cache=True, **{self._cache_argument(model): cache}).logits
        if self.task in ("causal-lm-train", "seq2seq-train"):
            return model(**inputs).loss
        if self.task == "causal-lm-prefill":
            # The prompt's forward as an engine runs it: filling a KV cache for the decode
            # steps after it (target/prefill.py predicts the same call). Without a cache,
            # transformers' mask preparation looks for packed sequences in the position ids
            # and reads a tensor's value, which meta tensors (--target-gpu) cannot give.
            return model(**inputs, use_cache=True).logits
        return model(**inputs).logits

    @staticmethod
    def _cache_argument(model: Any) -> str:
        """``cache`` where the forward takes it (transformers >= 5.x deprecates the older
        name), else ``past_key_values``."""
        import inspect

        forward = inspect.signature(model.forward).parameters
        return "cache" if "cache" in forward else "past_key_values"

    @staticmethod
    def loss(outputs: Any, inputs: Any) -> Any:
        return outputs  # the model's own loss (labels in the inputs)
