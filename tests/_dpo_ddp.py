"""Two processes (torchrun, gloo, CPU) train PackedDPOMixin under PadlessTrainerMixin on a
padless plan with gradient accumulation 2: each process writes the gradient of the first
optimizer step (after DDP's reduction, before the optimizer), the pairs of each of its
micro-batches in that step and the metrics logged for them. Run by tests/test_trl_dpo_sampler.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging
from trl import DPOConfig, DPOTrainer

sys.path.insert(0, str(Path(__file__).parent))
import _hf_train as hft  # noqa: E402
from test_trl_dpo import BETA, _model, _text_rows, _tokenizer  # noqa: E402
from test_trl_dpo_sampler import CAPACITY, Recorded  # noqa: E402

from padless import Packing  # noqa: E402
from padless.hf import PackedDPOMixin, PadlessTrainerMixin  # noqa: E402


class Trainer(PadlessTrainerMixin, PackedDPOMixin, DPOTrainer):
    def _compute_loss(self, model, inputs, return_outputs):
        self.seen.append(inputs.pop("rows"))
        loss = super()._compute_loss(model, inputs, return_outputs)
        logged = self._metrics["train"]
        self.logged.append(
            {k: v[-1] for k, v in logged.items() if k.startswith(("rewards/", "logps/"))}
        )
        return loss


class FirstStep(TrainerCallback):
    """The gradient of the first optimizer step, as the optimizer gets it."""

    def __init__(self) -> None:
        self.grads: list[torch.Tensor] | None = None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.grads is None:
            self.grads = [p.grad.detach().clone() for p in kwargs["model"].parameters()]


def main() -> None:
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    hf_logging.set_verbosity_error()
    settings = {**hft.SETTINGS, "num_train_epochs": 1, "max_steps": 1, "max_grad_norm": 0.0}
    first = FirstStep()
    trainer = Trainer(
        model=_model(0), ref_model=_model(1), processing_class=_tokenizer(),
        args=DPOConfig(str(out / "run"), **settings, beta=BETA, bf16=False),
        train_dataset=Dataset.from_list(_text_rows(14, seed=2)), capacity=CAPACITY,
        batch_sampler=Packing(capacity=CAPACITY, rows_per_batch=1), callbacks=[first],
    )  # fmt: skip
    trainer.data_collator = Recorded(CAPACITY)
    trainer.seen, trainer.logged = [], []
    trainer.train()
    saved = {"grads": first.grads, "micro_batches": trainer.seen, "metrics": trainer.logged}
    torch.save(saved, out / f"dpo{rank}.pt")


if __name__ == "__main__":
    main()
