"""spec.model: what the fleet serves (the weights, the names clients ask for, LoRA adapters) and
where the weights come from. Pure."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet_operator.spec import crd
from fleet_operator.spec.fields import Fields, SpecError, list_of_objects
from fleet_operator.spec.sources import SecretKeyRef, VolumeSource, parse_secret_ref, parse_volume_source


@dataclass(frozen=True)
class LoraAdapter:
    """spec.model.loraAdapters[]: a PEFT LoRA adapter the pods serve per request (--lora-paths)."""

    name: str
    path: str  # a folder in the image or on the cache volume


@dataclass(frozen=True)
class ModelSpec:
    source: str  # hub id, path or .gguf file: the server's --model-path
    served_name: str
    dtype: str = crd.default("model", "dtype")
    cache: VolumeSource | None = None  # None: an emptyDir, each pod downloads
    hf_token: SecretKeyRef | None = None
    aliases: tuple[str, ...] = ()  # more names the base model answers to
    lora_adapters: tuple[LoraAdapter, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a request's `model` may give: the served name, the aliases, the adapters'."""
        return (self.served_name, *self.aliases, *(adapter.name for adapter in self.lora_adapters))


def parse_model(model: Fields, fleet_name: str) -> ModelSpec:
    source = model.string("source")
    if not source:
        raise SpecError("spec.model.source is required (a hub id, a path or a .gguf file)")
    model.string("name")  # a string, if given
    spec = ModelSpec(source=source, served_name=served_name(fleet_name, model.value),
                     dtype=model.enum("dtype"),
                     cache=parse_volume_source(model.value.get("cache"), "spec.model.cache"),
                     hf_token=parse_secret_ref(model.value.get("hfTokenSecretRef"), "spec.model.hfTokenSecretRef"),
                     aliases=_strings(model.value.get("aliases"), "spec.model.aliases"),
                     lora_adapters=_adapters(model.value.get("loraAdapters")))
    _check_names(spec)
    return spec


def served_name(fleet_name: str, model: Mapping[str, Any]) -> str:
    """What the fleet's pods report as their model: spec.model.name, else the fleet's name."""
    name = model.get("name")
    return name if isinstance(name, str) and name else fleet_name


def served_names(fleet_name: str, model: Mapping[str, Any]) -> tuple[str, ...]:
    """Every name another fleet's raw spec.model answers to (for a gateway that routes to it):
    forgiving, as that spec is that fleet's reconcile's to judge."""
    aliases = [a for a in model.get("aliases") or () if isinstance(a, str) and a]
    adapters = [a.get("name") for a in model.get("loraAdapters") or () if isinstance(a, Mapping)]
    return tuple(dict.fromkeys([served_name(fleet_name, model), *aliases,
                                *(a for a in adapters if isinstance(a, str) and a)]))


def _strings(raw: Any, path: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        raise SpecError(f"{path} must be a list of names, got {raw!r}")
    return tuple(raw)


def _adapters(raw: Any) -> tuple[LoraAdapter, ...]:
    adapters = []
    for i, entry in enumerate(list_of_objects(raw, "spec.model.loraAdapters")):
        name, path = entry.get("name"), entry.get("path")
        if not (isinstance(name, str) and name and isinstance(path, str) and path):
            raise SpecError(f"spec.model.loraAdapters[{i}] needs a name and a path")
        adapters.append(LoraAdapter(name, path))
    return tuple(adapters)


def _check_names(spec: ModelSpec) -> None:
    """The server's rules, at the door (else the pods exit 2 in a crash loop): one name, one model;
    a name goes through the gateway's comma-separated --fleet-model, an adapter's through
    `<served name>:<adapter>`."""
    names = spec.names
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SpecError(f"spec.model: the names {repeated} are given twice (name, aliases, loraAdapters)")
    for name in names:
        if "," in name or "=" in name or any(ch.isspace() for ch in name):
            raise SpecError(f"spec.model: the name {name!r} may not hold ',', '=' or spaces")
    for adapter in spec.lora_adapters:
        if ":" in adapter.name:
            raise SpecError(f"spec.model.loraAdapters: {adapter.name!r} may not hold ':' "
                            f"(a request's <served name>:<adapter> splits there)")
