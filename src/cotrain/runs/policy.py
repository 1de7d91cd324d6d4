"""One trained role of a run as a record: its model, tokenizer, optimizer and learning-rate schedule, and its frozen
reference where it has one. A recipe's `roles` map role names to these; checkpoints save and restore them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Policy:
    """A role's model (trained in place), its tokenizer, its optimizer and scheduler, and its frozen reference (the
    start a KL term is measured against; None where there is none)."""

    model: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    reference: Any = None
