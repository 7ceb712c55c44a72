"""AdapterSet: LoRA adapters applied per batch row, so requests of different adapters share a forward.

Each targeted Linear layer gets a forward hook that adds, for the rows of each adapter in the
forward, that adapter's scale * B(A(x)) to the base layer's output (punica's idea, in plain
matmuls: the base weights stay unmerged and shared; an adapter costs only its rank's matmuls over
its own rows, a slice of the batch: the runner puts an adapter's rows side by side). Which rows
take which adapter is set by the runner around each decoder call (`rows()`); outside it, and for
base rows, the hooks add nothing. The layers' inputs are
[rows, tokens, features] in every forward the runner makes (query and items alike).
NOTE: hooks read Python state per call, which a compiled graph cannot: a runner with adapters
stays eager (compile_start.py).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator, Sequence

from server.lora import Adapter, LoraWeights

RowPlan = list[tuple[str, slice]]  # (adapter, the run of rows that takes it)


def plan_rows(adapters: Sequence[str | None]) -> RowPlan:
    """Each run of consecutive rows of one adapter in `adapters` (one entry per row; None: the
    base model, no run). The runner puts an adapter's rows side by side, so each adapter is one
    run: its update reads and writes a slice of the rows (views, no gather or scatter)."""
    plan: RowPlan = []
    for name, rows in itertools.groupby(range(len(adapters)), key=lambda row: adapters[row]):
        rows = list(rows)
        if name is not None:
            plan.append((name, slice(rows[0], rows[-1] + 1)))
    return plan


class AdapterSet:
    def __init__(self, model, adapters: Sequence[Adapter] = ()) -> None:
        """Hook every Linear layer of `model` that some adapter targets (load_adapter checked them)."""
        self.adapters = {adapter.name: adapter for adapter in adapters}
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
        self._plan = plan_rows(adapters) if self.adapters else []
        try:
            yield
        finally:
            self._plan = []

    def _add_updates(self, weights: dict[str, LoraWeights], _module, inputs, output):
        for name, rows in self._plan:
            lora = weights.get(name)
            if lora is not None:  # else this adapter leaves this layer as it is
                # NOTE: in place: the output is the base layer's fresh tensor, not yet read
                output[rows] += lora.delta(inputs[0][rows])
        return output

    def to_dict(self) -> dict:
        """What /get_server_info shows: each adapter's path, ranks and layers."""
        return {name: adapter.to_dict() for name, adapter in self.adapters.items()}
