"""ServedModels: the names this server answers to, and what a request's `model` selects. Pure.

A request's `model` is the base model when absent, empty or any served name
(`--served-model-name`, several allowed), a LoRA adapter when it is the adapter's own name or
`<served name>:<adapter>` (SGLang's form), and a 404 naming everything served otherwise (vLLM
answers an unknown model so). Built from the config alone, so it answers while the model loads.
"""
from __future__ import annotations

from dataclasses import dataclass

from server.errors import NotFound


@dataclass(frozen=True)
class ServedModels:
    names: tuple[str, ...]     # the base model's names, the primary first
    adapters: tuple[str, ...]  # LoRA adapter names (none holds ':', none is a served name)

    def resolve(self, model: str | None) -> str | None:
        """The adapter `model` selects, None for the base model; NotFound (404) for a name not
        served here."""
        if not model or model in self.names:
            return None
        if model in self.adapters:
            return model
        # rpartition: a served name may itself hold ':' (e.g. "qwen3:8b"); an adapter's never does
        base, sep, adapter = model.rpartition(":")
        if sep and base in self.names and adapter in self.adapters:
            return adapter
        raise NotFound(f"model {model!r} is not served here; {self.described()}")

    def described(self) -> str:
        """Every name a request may give, for the 404's message."""
        served = f"served: {', '.join(map(repr, self.names))}"
        if not self.adapters:
            return served + " (no LoRA adapters)"
        forms = ", ".join(f"{name!r} (or '{self.names[0]}:{name}')" for name in self.adapters)
        return f"{served}; LoRA adapters: {forms}"
