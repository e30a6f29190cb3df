"""Classifier training: argparse, dataclass config, Dataset/DataLoader, AdamW, grad accumulation,
clip_grad_norm_, cosine LR, eval accuracy under no_grad, early stopping, checkpoint round trip."""

import argparse
import io
import logging
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
log = logging.getLogger("train")


@dataclass
class Config:
    epochs: int = 2
    batch_size: int = 16
    lr: float = 3e-3
    accum: int = 2
    hidden: int = 32
    clip: float = 1.0
    patience: int = 2
    classes: list = field(default_factory=lambda: [0, 1, 2])


class Blobs(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 3, (n,), generator=g)
        centers = torch.tensor([[2.0, 0.0], [-2.0, 1.0], [0.0, -2.0]])
        self.x = centers[self.y] + 0.7 * torch.randn(n, 2, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(2, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, cfg.hidden)
        )
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, len(cfg.classes))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.drop(self.norm(F.relu(self.body(x))))
        return self.head(h)


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            total += y.numel()
    model.train()
    return loss_sum / total, correct / total


def train_epoch(model, opt, sched, loader, cfg):
    running = 0.0
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y) / cfg.accum
        loss.backward()
        running += loss.item()
        if (i + 1) % cfg.accum == 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    return running / len(loader) * cfg.accum, float(norm)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()
    cfg = Config(epochs=args.epochs, lr=args.lr)
    torch.manual_seed(0)
    train = DataLoader(Blobs(128, 1), batch_size=cfg.batch_size, shuffle=True, num_workers=0)
    val = DataLoader(Blobs(64, 2), batch_size=32)
    model = Net(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    steps = cfg.epochs * len(train) // cfg.accum
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    best, bad = float("inf"), 0
    best_state = None
    for epoch in range(cfg.epochs):
        tl, gn = train_epoch(model, opt, sched, train, cfg)
        vl, acc = evaluate(model, val)
        lr = sched.get_last_lr()[0]
        log.info(f"epoch {epoch} train {tl:.3f} val {vl:.3f} acc {acc:.3f} lr {lr:.5f}")
        print(f"epoch={epoch} train={tl:.3f} val={vl:.3f} acc={acc:.3f} gn={gn:.2f}")
        if vl < best - 1e-4:
            best, bad = vl, 0
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, buf)
            best_state = buf.getvalue()
        else:
            bad += 1
            if bad >= cfg.patience:
                print("early stop")
                break
    ckpt = torch.load(io.BytesIO(best_state), weights_only=True)
    fresh = Net(cfg)
    fresh.load_state_dict(ckpt["model"])
    vl, acc = evaluate(fresh, val)
    print(f"restored epoch {ckpt['epoch']} val={vl:.3f} acc={acc:.3f}")


if __name__ == "__main__":
    main()
