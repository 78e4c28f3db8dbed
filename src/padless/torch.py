"""PyTorch glue: collate functions and DataLoader helpers. The only padless module that imports torch."""

from __future__ import annotations

import torch
