"""padless.lightning: LightningBatches alone, real Lightning runs in this process (one device,
torchdata's StatefulDataLoader with 2 workers, dropout) resumed from checkpoints, and a real
2-process Lightning DDP run (torchrun, gloo) with torchdata's StatefulDataLoader and
padless.torch.StatefulLoader, resumed from checkpoints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from padless import PackingSampler, TokenBudgetSampler
from padless.lightning import LightningBatches

HERE = Path(__file__).parent


def test_len_is_the_whole_epoch_after_a_mid_epoch_load():
    lengths = np.random.default_rng(1).integers(1, 40, 300)
    sampler = TokenBudgetSampler(lengths, max_tokens=200, seed=2, world_size=2, rank=1)
    batches = LightningBatches(sampler)
    whole = len(batches)
    batches.set_epoch(3)
    epoch3 = [list(b) for b in batches]
    state = {**batches.state_dict(), "position": 6}  # 3 steps of 2 processes trained
    fresh = LightningBatches(
        TokenBudgetSampler(lengths, max_tokens=200, seed=2, world_size=2, rank=1)
    )
    fresh.load_state_dict(state)
    assert len(fresh) == whole == len(epoch3)
    assert fresh.padless_sampler.epoch == 3
    assert [list(b) for b in fresh] == epoch3[3:]
    assert len(fresh) == whole  # still the whole epoch once the iteration has begun


def test_a_state_at_an_epochs_end_goes_on_with_the_next_epoch():
    lengths = np.random.default_rng(1).integers(1, 40, 300)

    def make():
        return TokenBudgetSampler(lengths, max_tokens=200, seed=2, world_size=2, rank=1)

    bare = make()
    end = {**bare.state_dict(), "position": 2 * len(bare)}  # every slot of epoch 0, 2 processes
    bare.set_epoch(1)
    epoch1 = [list(b) for b in bare]
    batches = LightningBatches(make())
    batches.load_state_dict(end)
    assert batches.padless_sampler.epoch == 1 and len(batches) == len(epoch1)
    batches.set_epoch(1)  # what Lightning calls next: nothing changes
    assert [list(b) for b in batches] == epoch1


def test_set_epoch_reaches_the_sampler_through_batch_sampler_sampler():
    sampler = PackingSampler(np.arange(1, 60), capacity=64, seed=0)
    batches = LightningBatches(sampler)
    assert batches.sampler is batches  # where Lightning and accelerate call set_epoch
    first = [list(b) for b in batches]
    batches.sampler.set_epoch(1)
    assert sampler.epoch == 1
    assert [list(b) for b in batches] != first


def test_refuses_what_is_not_a_padless_sampler_and_states_that_are_not_dicts():
    with pytest.raises(TypeError, match="must be a padless sampler"):
        LightningBatches([[0, 1], [2]])
    batches = LightningBatches(TokenBudgetSampler(np.arange(1, 50), max_tokens=100, seed=0))
    for bad in (None, [("epoch", 0)], "state"):
        with pytest.raises(TypeError, match=r"state must be a dict from LightningBatches"):
            batches.load_state_dict(bad)  # type: ignore[arg-type]


def test_a_foreign_state_is_refused_at_len_then_by_iter_set_epoch_and_state_dict():
    lengths = np.arange(1, 50)
    batches = LightningBatches(TokenBudgetSampler(lengths, max_tokens=100, seed=0))
    other = TokenBudgetSampler(lengths, max_tokens=100, seed=0, shuffle=False).state_dict()
    batches.load_state_dict(other)  # inside the loader's iterator: Lightning would hide it
    assert list(iter(batches)) == []  # the loader's own iteration (and its prefetch) gets nothing
    with pytest.raises(ValueError, match="cannot resume TokenBudgetSampler .* settings differ"):
        len(batches)  # what Lightning asks right after making the iterator
    assert len(batches) == 0  # Lightning's teardown asks again: its error is the first one
    for call in (lambda: iter(batches), lambda: batches.set_epoch(1), batches.state_dict):
        with pytest.raises(ValueError, match="settings differ"):
            call()
    batches.load_state_dict(TokenBudgetSampler(lengths, max_tokens=100, seed=0).state_dict())
    assert len(list(batches)) == len(batches) > 0  # a state that fits clears the refusal


def test_a_mid_epoch_state_of_another_world_size_is_refused():
    lengths = np.random.default_rng(1).integers(1, 40, 300)
    saved = TokenBudgetSampler(lengths, max_tokens=200, seed=2, world_size=2).state_dict()
    batches = LightningBatches(TokenBudgetSampler(lengths, max_tokens=200, seed=2))
    batches.load_state_dict({**saved, "position": 6})
    with pytest.raises(ValueError, match="written by 2 processes, this run has 1"):
        len(batches)
    batches.load_state_dict(saved)  # at an epoch's start the world size may change
    assert len(batches) > 0


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """An uninterrupted 2-epoch run on one device (2 workers, dropout, ExactResume), with
    checkpoints every half epoch and at each epoch's end; the module's import and the run's
    records."""
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    sys.path.insert(0, str(HERE))
    import _lightning_train as lt

    lt.quiet()
    out = tmp_path_factory.mktemp("lightning")
    steps = lt.per_epoch(1)
    full = lt.fit(str(out / "full"), every=steps // 2, epoch_ends=True)
    return lt, out, steps, full


def test_resume_at_an_epochs_last_batch_with_workers_is_exact_batches_and_losses(one_device):
    lt, out, steps, full = one_device
    assert [x["index"] for x in full] == lt.bare(0, 1, 2)
    for step in (steps, steps // 2):  # an epoch's last batch (the next epoch was skipped), mid
        lt.torch.manual_seed(step)  # a fresh process's random state: must not matter
        resumed = lt.fit(str(out / f"r{step}"), ckpt=str(out / "full" / f"step={step}.ckpt"))
        assert resumed == full[step:], step  # same batches, losses bitwise (dropout)
    # without ExactResume the batches are the same, the dropout masks (losses) not
    plain = lt.fit(str(out / "plain"), ckpt=str(out / "full" / f"step={steps}.ckpt"), exact=False)
    assert [x["index"] for x in plain] == [x["index"] for x in full[steps:]]
    assert [x["loss"] for x in plain] != [x["loss"] for x in full[steps:]]


def test_resume_in_the_epoch_after_a_resumed_epochs_end_is_exact(one_device):
    """Resumed at epoch 0's last batch, Lightning 2.6 does not count epoch 1 as started: its
    checkpoints read as "epoch 1 not begun", and resumed from one Lightning skipped the loader's
    state and trained epoch 1 again from its start (with 2 workers, after 4 batches of epoch 0).
    ExactResume counts the epoch (its checkpoints resume right without it), and mends such a
    checkpoint written without it."""
    lt, out, steps, full = one_device
    begun = str(out / "full" / f"step={steps}.ckpt")
    tail = [x["index"] for x in full[steps + 1 :]]
    for write, read in ((True, True), (True, False), (False, True)):
        first = out / f"first-{write}"
        if not first.exists():
            once = lt.fit(str(first), ckpt=begun, every=1, max_steps=steps + 1, exact=write)
            assert once[0]["index"] == full[steps]["index"] and len(once) == 1
        ckpt = str(first / f"step={steps + 1}.ckpt")
        rest = lt.fit(str(out / f"rest-{write}-{read}"), ckpt=ckpt, exact=read)
        assert [x["index"] for x in rest] == tail, (write, read)
        if write and read:  # the random state is in the checkpoint: losses bitwise too
            assert once == full[steps : steps + 1] and rest == full[steps + 1 :]


def test_resume_from_an_end_of_epoch_checkpoint_with_workers_is_exact(one_device):
    """Lightning makes the loader's iterator (2 workers fetch 4 batches) before set_epoch when
    it resumes at an epoch boundary: epoch 1 began with epoch 0's first batches."""
    lt, out, steps, full = one_device
    resumed = lt.fit(str(out / "epoch-end"), ckpt=str(out / "full" / "epoch=0.ckpt"))
    assert resumed == full[steps:]


def test_lightning_shows_padless_error_for_a_state_that_does_not_fit(one_device):
    lt, out, steps, _ = one_device
    other = {**lt.SETTINGS, "shuffle": False}  # a budget may change during a run, not this
    ckpt = str(out / "full" / f"step={steps // 2}.ckpt")
    with pytest.raises(ValueError, match="cannot resume TokenBudgetSampler .* settings differ"):
        lt.fit(str(out / "other"), ckpt=ckpt, settings=other)  # not Lightning's RuntimeError


def test_exact_resume_at_another_world_size_warns_and_keeps_a_fresh_random_state():
    pytest.importorskip("lightning")
    from padless.lightning import ExactResume

    two = ExactResume().state_dict()
    two["ranks"] = two["ranks"] * 2
    with pytest.warns(UserWarning, match="random state of 2 processes, this run has 1"):
        ExactResume().load_state_dict(two)  # the batches resume exactly all the same
    with pytest.raises(ValueError, match="written by ExactResume"):
        ExactResume().load_state_dict({"ranks": None})


def test_ddp_two_processes_resume_exactly(tmp_path):
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    sys.path.insert(0, str(HERE))
    from _procs import torchrun

    torchrun("_lightning_train.py", tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["repeated"] == 0  # so every index is seen exactly once per epoch
    for res in ranks:
        assert [x["index"] for x in res["full"]] == res["bare"]  # set_epoch reached the sampler
        step = int(next(iter(res["torch_resumed"])))
        assert [x["index"] for x in res["torch_first"]] == res["bare"][:step]
        epochs = [[x["index"] for x in res["full"] if x["epoch"] == e] for e in (0, 1)]
        assert epochs[0] != epochs[1]
        for mark, record in res["resumed"].items():  # torchdata: batches and losses
            assert record == [x for x in res["full"] if x["step"] >= int(mark)], mark
        for mark, record in res["torch_resumed"].items():  # padless.torch's loader: batches
            tail = [x["index"] for x in res["full"] if x["step"] >= int(mark)]
            assert [x["index"] for x in record] == tail, mark
    a, b = ranks[0]["full"], ranks[1]["full"]
    assert len(a) == len(b)
    for epoch in (0, 1):
        mine = [tuple(x["index"]) for x in a if x["epoch"] == epoch]
        theirs = [tuple(x["index"]) for x in b if x["epoch"] == epoch]
        assert not set(mine) & set(theirs)
        assert sorted(i for batch in mine + theirs for i in batch) == list(range(ranks[0]["n"]))
    # a step checkpoint at epoch 0's last batch, resumed by one process: epoch 1 whole (its 2
    # processes' 11 batches each read to Lightning as half of the 1-process epoch 1: it trained
    # only its last part)
    import _lightning_train as lt

    lt.quiet()
    steps = lt.per_epoch(2)
    assert lt.per_epoch(1) > steps
    ckpt = tmp_path / "full" / f"step={steps}.ckpt"
    one = lt.fit(str(tmp_path / "one"), ckpt=str(ckpt), workers=0)
    assert [x["index"] for x in one] == lt.bare(0, 1, 2)[lt.per_epoch(1) :]
    assert {x["epoch"] for x in one} == {1}


def test_docs_example(tmp_path):
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    sys.path.insert(0, str(HERE))
    from _docs import run_example

    run_example("lightning", tmp_path)
    assert (tmp_path / "ckpt" / "step=5.ckpt").exists()


def test_step_rng_refuses_a_corrupt_state_when_loaded():
    """A state whose generators' values are not ones StepRng saves: refused by
    load_state_dict (it failed at the first begin()), the generators left as they were."""
    import torch

    from padless.torch import StepRng, get_rng_state

    before = torch.get_rng_state()
    for bad in (
        {**get_rng_state(), "torch": torch.zeros(3)},
        {"python": 1, "numpy": 2, "torch": 3, "cuda": 4},
    ):
        with pytest.raises(ValueError, match="state\\['next'\\] is not a generators' state"):
            StepRng().load_state_dict({"version": 1, "next": bad})
        assert torch.equal(torch.get_rng_state(), before)
    rng = StepRng()
    rng.load_state_dict({"version": 1, "next": get_rng_state()})
    rng.begin()


def test_plain_loop_with_step_rng_resumes_losses_bitwise():
    """The plain-loop pattern of padless.torch.StepRng (what ExactResume does for Lightning):
    torchdata's loader (its iterator draws a seed at every epoch), dropout, resumed mid-epoch
    and at an epoch's end."""
    pytest.importorskip("torchdata")
    import io

    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    from padless.torch._rng import StepRng

    lengths = np.random.default_rng(0).integers(1, 50, 120)

    def train(saved=None, stop=None):
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(1, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)
        )
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        sampler = TokenBudgetSampler(lengths, max_tokens=300, seed=1)
        loader = StatefulDataLoader(
            torch.arange(len(lengths)), batch_sampler=sampler, num_workers=0, collate_fn=torch.stack
        )
        rng, first_epoch, step, losses = StepRng(), 0, 0, []
        if saved is not None:
            ckpt = torch.load(io.BytesIO(saved), weights_only=True)  # as from a file
            net.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["opt"])
            loader.load_state_dict(ckpt["loader"])
            rng.load_state_dict(ckpt["rng"])
            first_epoch, step = ckpt["epoch"], ckpt["step"]
        for epoch in range(first_epoch, 2):
            sampler.set_epoch(epoch)  # a loaded loader state then puts it at its position
            for batch in loader:
                with rng.step():
                    loss = net(batch.float()[:, None] / 120).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                losses.append(loss.item())
                step += 1
                if step == stop:
                    buf = io.BytesIO()
                    state = {
                        "model": net.state_dict(),
                        "opt": opt.state_dict(),
                        "rng": rng.state_dict(),
                    }
                    torch.save(
                        {**state, "loader": loader.state_dict(), "epoch": epoch, "step": step}, buf
                    )
                    return losses, buf.getvalue()
        return losses, None

    per_epoch = len(TokenBudgetSampler(lengths, max_tokens=300, seed=1))
    full, _ = train()
    for stop in (per_epoch // 2, per_epoch):  # mid-epoch; an epoch's last batch
        _, saved = train(stop=stop)
        torch.manual_seed(stop)  # a fresh process's random state: must not matter
        resumed, _ = train(saved)
        assert resumed == full[stop:], stop


def test_check_packed_refuses_a_model_whose_packed_documents_attend_across(tmp_path):
    """Lightning keeps use_cache=True: a tiny Llama sees across packed documents (as OPT always
    does); CheckPacked stops fit before the first step, and a model kept apart trains."""
    pytest.importorskip("lightning")
    pytest.importorskip("transformers")
    import lightning.pytorch as pl
    import torch
    import transformers
    from torch.utils.data import DataLoader

    from padless.lightning import CheckPacked

    lengths = np.random.default_rng(0).integers(3, 20, 40)
    dataset = [list(range(1, n + 1)) for n in lengths]

    class Module(pl.LightningModule):
        def __init__(self, use_cache):
            super().__init__()
            config = transformers.LlamaConfig(
                vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, use_cache=use_cache,
            )  # fmt: skip
            self.model = transformers.LlamaForCausalLM(config)
            self.steps = 0

        def training_step(self, batch, batch_idx):
            self.steps += 1
            keys = ("input_ids", "position_ids", "labels")
            return self.model(**{k: batch[k] for k in keys}).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def fit(module, bare=False):
        from padless.torch import collate_for

        sampler = PackingSampler(lengths, capacity=32, rows_per_batch=2, seed=0)
        loader = DataLoader(
            dataset,
            batch_sampler=sampler if bare else LightningBatches(sampler),
            collate_fn=collate_for(sampler),
        )
        trainer = pl.Trainer(
            max_steps=2, accelerator="cpu", devices=1, use_distributed_sampler=False,
            logger=False, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, callbacks=[CheckPacked()], default_root_dir=tmp_path,
        )  # fmt: skip
        trainer.fit(module, train_dataloaders=loader)
        return module.steps

    with pytest.raises(ValueError, match="packed documents attend to each other"):
        fit(Module(use_cache=True))
    with pytest.raises(ValueError, match="packed documents attend to each other"):
        fit(Module(use_cache=True), bare=True)  # a sampler without LightningBatches too
    assert fit(Module(use_cache=False)) == 2
    with pytest.raises(TypeError, match="model must be an attribute name"):
        CheckPacked(model=3)
