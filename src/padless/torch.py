"""PyTorch glue: collate functions and DataLoader helpers. The only padless module that imports torch."""

from __future__ import annotations

import torch

__all__: list[str] = []
_TORCH_VERSION = torch.__version__
