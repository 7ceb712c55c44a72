"""AdapterSet: LoRA adapters applied per batch row, so requests of different adapters share a forward.

Each targeted Linear layer gets a forward hook that adds, for the rows of each adapter in the
forward, that adapter's scale * B(A(x)) to the base layer's output (punica's idea, in plain
matmuls: the base weights stay unmerged and shared; an adapter costs only its rank's matmuls over
its own rows). Which rows take which adapter is set by the runner around each decoder call
(`rows()`); outside it, and for base rows, the hooks add nothing. The layers' inputs are
[rows, tokens, features] in every forward the runner makes (query and items alike).
NOTE: hooks read Python state per call, which a compiled graph cannot: a runner with adapters
stays eager (compile_start.py).
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

import torch

from server.lora import Adapter, LoraWeights

RowPlan = list[tuple[str, torch.Tensor | None]]  # (adapter, its rows; None: every row)


def plan_rows(adapters: Sequence[str | None], device: torch.device) -> RowPlan:
    """Per adapter named in `adapters` (one entry per row; None: the base model), the row indices
    that take it, in first-seen order; None where one adapter takes every row (no gather)."""
    rows_of: dict[str, list[int]] = {}
    for row, name in enumerate(adapters):
        if name is not None:
            rows_of.setdefault(name, []).append(row)
    if len(rows_of) == 1 and len(next(iter(rows_of.values()))) == len(adapters):
        return [(next(iter(rows_of)), None)]
    return [(name, torch.tensor(rows, device=device)) for name, rows in rows_of.items()]


class AdapterSet:
    def __init__(self, model, adapters: Sequence[Adapter] = ()) -> None:
        """Hook every Linear layer of `model` that some adapter targets (load_adapter checked them)."""
        self.adapters = {adapter.name: adapter for adapter in adapters}
        self._device = next(model.parameters()).device
        self._plan: RowPlan = []
        by_module: dict[str, dict[str, LoraWeights]] = {}
        for adapter in adapters:
            for module_name, weights in adapter.modules.items():
                by_module.setdefault(module_name, {})[adapter.name] = weights
        for module_name, weights in by_module.items():
            model.get_submodule(module_name).register_forward_hook(functools.partial(self._add_updates, weights))

    def __bool__(self) -> bool:
        return bool(self.adapters)

    @contextlib.contextmanager
    def rows(self, adapters: Sequence[str | None]) -> Iterator[None]:
        """Forwards inside take adapters[row] for each batch row (None: the base model).
        KeyError for an adapter not loaded."""
        unknown = {name for name in adapters if name is not None} - set(self.adapters)
        if unknown:
            raise KeyError(f"LoRA adapters not loaded: {sorted(unknown)}")
        self._plan = plan_rows(adapters, self._device) if self.adapters else []
        try:
            yield
        finally:
            self._plan = []

    def _add_updates(self, weights: dict[str, LoraWeights], _module, inputs, output):
        for name, rows in self._plan:
            lora = weights.get(name)
            if lora is None:  # this adapter leaves this layer as it is
                continue
            if rows is None:
                output = output + lora.delta(inputs[0])
            else:
                output = output.index_add(0, rows, lora.delta(inputs[0].index_select(0, rows)))
        return output

    def to_dict(self) -> dict:
        """What /get_server_info shows: each adapter's path, ranks and layers."""
        return {name: adapter.to_dict() for name, adapter in self.adapters.items()}
