"""Batch layout: how one scheduled batch is cut into length-grouped forwards. Pure, no torch.

A forward right-pads every row to its longest own length, so rows of mixed length compute tokens
that carry nothing. plan_groups sorts the rows by own length (then prefix length) and cuts the
sorted run wherever adding the next row would push the group's padding over a fraction of its
computed tokens (the batch as a whole is already within the scheduler's max_prefill_tokens). The
scheduler's FIFO order is untouched: the runner runs the groups and puts the scores back in batch
order.
"""
from __future__ import annotations

from dataclasses import dataclass

# On a CPU the forward is compute-bound even at one row, so an extra, tighter forward costs little
# and 5 % padding is a fair price for not cutting every group down to one row (docs/performance.md).
MAX_PADDING_FRACTION = 0.05
# On a CPU a forward of more item tokens than this is slower per item, not faster: its activations
# leave the caches (measured in float32: docs/performance.md, issue 28). The cap is one size of
# activations: a 2-byte dtype holds twice the tokens in it (bfloat16 on AMX, compiled: 4096 tokens
# per forward +15 % items/s against 2048, 8192 no better; issue 39). A bigger scheduler batch is
# cut into forwards of about this size; a GPU, which wants big forwards, gets no cap (None).
CPU_MAX_FORWARD_FLOAT32_TOKENS = 2048


def max_forward_tokens(device_type: str, bytes_per_value: int) -> int | None:
    """The item tokens one forward may compute on this device in a dtype of this size."""
    if device_type != "cpu":
        return None
    return CPU_MAX_FORWARD_FLOAT32_TOKENS * 4 // max(bytes_per_value, 1)


@dataclass(frozen=True)
class Group:
    """Rows (indexes into the batch) that run in one forward, padded to max_own_tokens."""

    rows: tuple[int, ...]
    max_own_tokens: int
    num_own_tokens: int  # real own tokens of the rows

    @property
    def num_computed_tokens(self) -> int:
        return len(self.rows) * self.max_own_tokens

    @property
    def num_padding_tokens(self) -> int:
        return self.num_computed_tokens - self.num_own_tokens


def plan_groups(own_lens: list[int], prefix_lens: list[int],
                max_padding_fraction: float = MAX_PADDING_FRACTION,
                max_forward_tokens: int | None = None) -> list[Group]:
    """Groups covering every row exactly once, shortest rows first.

    Within a group, padding <= max_padding_fraction of its computed tokens (rows x longest own
    length), and computed tokens <= max_forward_tokens unless the group is one row (None: no
    cap). max_padding_fraction=1 and no cap give one group: the whole batch padded (the old
    layout).
    """
    if len(own_lens) != len(prefix_lens):
        raise ValueError(f"{len(own_lens)} own lengths but {len(prefix_lens)} prefix lengths")
    if not 0 <= max_padding_fraction <= 1:
        raise ValueError(f"max_padding_fraction must be in [0, 1], got {max_padding_fraction}")
    order = sorted(range(len(own_lens)), key=lambda row: (own_lens[row], prefix_lens[row]))
    groups: list[Group] = []
    rows: list[int] = []
    num_own = 0
    for row in order:
        length = own_lens[row]  # sorted: the longest of the group if the row joins it
        computed = (len(rows) + 1) * length
        fits = (computed - num_own - length <= max_padding_fraction * computed
                and (max_forward_tokens is None or computed <= max_forward_tokens))
        if rows and not fits:
            groups.append(Group(tuple(rows), own_lens[rows[-1]], num_own))
            rows, num_own = [], 0
        rows.append(row)
        num_own += length
    if rows:
        groups.append(Group(tuple(rows), own_lens[rows[-1]], num_own))
    return groups
