"""Training code written the way people write it: optimizer steps, `loss.backward()`, gradient
accumulation and clipping, schedulers, EMA, BatchNorm in train mode, autocast, seeded data
augmentation, metrics read with `.item()`, progress lines. Every case compares parameters (the
module's state_dict) with eager after each of two calls, so a wrong update shows.

Most cases compile a `Trainer` module holding a model and an optimizer: the harness deep-copies it
for eager (the optimizer comes along, pointing at the copy's parameters).
Counts are what a good compiler should reach; where framejit does worse the count is what it does,
with a `# capture gap:` comment.
"""

from __future__ import annotations

import logging
import math
import random
import sys

import pytest
import torch
import torch.nn.functional as F
from harness import Corpus, ints, rand
from torch import nn

corpus = Corpus(grad=True)
logger = logging.getLogger("corpus.training")


def classifier(din=8, dh=16, classes=4, dropout=0.0):
    return nn.Sequential(nn.Linear(din, dh), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dh, classes))


def batches(n=2, bs=4, din=8, classes=4):
    return [(rand(bs, din), ints(classes, bs)) for _ in range(n)]


class Trainer(nn.Module):
    def __init__(self, model, opt="sgd", lr=0.1, **opt_kwargs):
        super().__init__()
        self.model = model
        if opt == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, **opt_kwargs)
        elif opt == "adamw":
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, **opt_kwargs)
        else:
            self.opt = torch.optim.Adam(self.model.parameters(), lr=lr, **opt_kwargs)
        self.step_count = 0

    def forward(self, data):
        losses = []
        for x, y in data:
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            self.opt.step()
            self.step_count += 1
            losses.append(round(loss.item(), 4))  # AOT's decompositions round differently
        return losses


# capture gap: loss.backward() and optimizer.step() are breaks (autograd and the optimizer run as
# Python); forward+loss of each step is one graph. The value `loss.item()` reads is a guarded
# constant of the code after it, so that (tensor-free) resume function recompiles for each new
# loss until config.recompile_limit: treating such a float as an unguarded input would avoid it.
# Two graphs: the forward of step 1, and of step 2 in its resume function, which a recompile of
# an earlier resume function (step_count changed) reuses, as resume functions are shared by code
@corpus.builder(lambda: (batches(),), graphs=2, fullgraph=False)
def sgd_steps_in_forward():
    return Trainer(classifier(), "sgd", lr=0.1, momentum=0.9)


@corpus.builder(lambda: (batches(),), graphs=2, fullgraph=False)
def adamw_steps_in_forward():
    return Trainer(classifier(), "adamw", lr=1e-2, weight_decay=0.01)


class AccumulatingTrainer(Trainer):
    def __init__(self, accumulation_steps=2, max_norm=1.0):
        super().__init__(classifier(), "adam", lr=1e-2)
        self.accumulation_steps = accumulation_steps
        self.max_norm = max_norm

    def forward(self, data):
        self.model.train()
        total = 0.0
        for i, (inputs, labels) in enumerate(data):
            outputs = self.model(inputs)
            loss = F.cross_entropy(outputs, labels) / self.accumulation_steps
            loss.backward()
            total += round(loss.item(), 4)
            if (i + 1) % self.accumulation_steps == 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
                total += 0.0 * round(grad_norm.item(), 4)
        return total


# the loop is compiled in pieces between backward(), item(), clip_grad_norm_ (torch's own,
# run as it is) and the optimizer
@corpus.builder(lambda: (batches(4),), graphs=7, fullgraph=False)
def gradient_accumulation_with_clipping():
    return AccumulatingTrainer()


class ManualSGD(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = classifier()

    def forward(self, x, y, lr=0.05):
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        with torch.no_grad():
            for p in self.net.parameters():
                p -= lr * p.grad
                p.grad = None
        return loss.detach()


# capture gap: `p.grad = None` on a parameter is not replayed, so each write is a break
@corpus.builder(lambda: (rand(4, 8), ints(4, 4)), graphs=6, fullgraph=False)
def manual_sgd_in_place_update():
    return ManualSGD()


class ManualSGDWithGradsFn(nn.Module):
    """The update written with torch.autograd.grad instead of .backward()."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(6, 3)

    def forward(self, x, target):
        params = list(self.net.parameters())
        loss = F.mse_loss(self.net(x), target)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(0.1 * g)
        return loss.detach(), [g.norm() for g in grads]


@corpus.builder(lambda: (rand(5, 6), rand(5, 3)), graphs=2, fullgraph=False)
def autograd_grad_then_sub_():
    return ManualSGDWithGradsFn()


class EMA(nn.Module):
    def __init__(self, decay=0.9):
        super().__init__()
        self.model = classifier()
        self.ema_model = classifier()
        self.ema_model.load_state_dict(self.model.state_dict())
        for p in self.ema_model.parameters():
            p.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update_ema(self):
        for ema_p, p in zip(self.ema_model.parameters(), self.model.parameters()):
            ema_p.lerp_(p, 1.0 - self.decay)

    def forward(self, x):
        with torch.no_grad():
            for p in self.model.parameters():
                p.mul_(0.95).add_(torch.ones_like(p), alpha=0.01)
        self.update_ema()
        return self.ema_model(x), self.model(x)


@corpus.builder(lambda: (rand(3, 8),))
def ema_lerp_under_no_grad():
    return EMA()


class EMAMulAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Linear(4, 4)
        self.teacher = nn.Linear(4, 4)
        self.teacher.requires_grad_(False)
        self.momentum = 0.99

    def forward(self, x):
        with torch.no_grad():
            m = self.momentum
            for name, param in self.student.named_parameters():
                teacher_param = self.teacher.get_parameter(name)
                teacher_param.data.mul_(m).add_((1 - m) * param.detach().data)
        return F.cosine_similarity(self.student(x), self.teacher(x), dim=-1).mean()


@corpus.builder(lambda: (rand(5, 4),))
def ema_mul_add_teacher():
    return EMAMulAdd()


# ---------------------------------------------------------------------------------------
# losses and metrics


@corpus.program(
    lambda: (rand(6, 10, grad=True), torch.tensor([1, 2, -100, 4, 9, -100])),
    graphs=1,
    fullgraph=False,
)
def cross_entropy_ignore_index_label_smoothing(logits, labels):
    loss = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.1)
    (grad,) = torch.autograd.grad(loss, logits) if logits.requires_grad else (None,)
    return loss, grad


@corpus.program(lambda: (rand(2, 5, 10, grad=True), ints(10, 2, 5)), graphs=2, breaks=1)
def lm_loss_shift_labels_backward(logits, labels):
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    shift_labels[:, 0] = -100
    loss = nn.CrossEntropyLoss()(
        shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1)
    )
    loss.backward()
    return loss.detach(), logits.grad


@corpus.program(lambda: (rand(4, 6), rand(4, 6), rand(4, 3)))
def mse_and_kl_log_target(pred, target, student_logits):
    mse = F.mse_loss(pred, target, reduction="mean")
    teacher_log_probs = F.log_softmax(target[:, :3], dim=-1)
    kl = F.kl_div(
        F.log_softmax(student_logits, dim=-1),
        teacher_log_probs,
        reduction="batchmean",
        log_target=True,
    )
    huber = F.smooth_l1_loss(pred, target, beta=0.5)
    return {"mse": mse, "kl": kl, "huber": huber, "total": mse + 0.5 * kl + huber}


def accuracy(logits, labels):
    preds = logits.argmax(dim=-1)
    return (preds == labels).float().mean().item()


@corpus.program(lambda: (rand(8, 4), ints(4, 8)), graphs=2, fullgraph=False)
def metrics_item_python_floats(logits, labels):
    loss = F.cross_entropy(logits, labels)
    metrics = {"loss": loss.item(), "acc": accuracy(logits, labels)}
    metrics["ppl"] = math.exp(metrics["loss"])
    metrics["summary"] = f"loss {metrics['loss']:.3f} acc {metrics['acc']:.2%}"
    return metrics


@corpus.program(lambda: (rand(6, 5), ints(5, 6)))
def topk_accuracy_tensors(output, target, topk=(1, 3)):
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


class ContrastiveCLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.image_proj = nn.Linear(12, 8, bias=False)
        self.text_proj = nn.Linear(10, 8, bias=False)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def forward(self, image_features, text_features):
        image_embeds = F.normalize(self.image_proj(image_features), dim=-1)
        text_embeds = F.normalize(self.text_proj(text_features), dim=-1)
        logit_scale = self.logit_scale.exp().clamp(max=100)
        logits_per_text = torch.matmul(text_embeds, image_embeds.t()) * logit_scale
        logits_per_image = logits_per_text.t()
        labels = torch.arange(logits_per_text.shape[0], device=logits_per_text.device)
        loss = (
            F.cross_entropy(logits_per_text, labels) + F.cross_entropy(logits_per_image, labels)
        ) / 2
        return loss, logits_per_image


@corpus.builder(lambda: (rand(5, 12), rand(5, 10)))
def clip_contrastive_loss():
    return ContrastiveCLIP()


@corpus.program(lambda: (ints(20, 3, 6), rand(3, 6, 20)), setup=lambda: torch.manual_seed(5))
def mlm_masking_labels(input_ids, logits):
    labels = input_ids.clone()
    probability_matrix = torch.full(labels.shape, 0.3)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    labels[~masked_indices] = -100
    inputs = input_ids.clone()
    inputs[masked_indices] = 1  # [MASK]
    loss = F.cross_entropy(logits.view(-1, 20), labels.view(-1), ignore_index=-100)
    return inputs, labels, loss


class Distiller(nn.Module):
    def __init__(self, temperature=2.0, alpha=0.5):
        super().__init__()
        self.student = classifier(dh=8)
        self.teacher = classifier(dh=32).eval()
        self.temperature = temperature
        self.alpha = alpha

    def forward(self, x, labels):
        with torch.no_grad():
            teacher_logits = self.teacher(x)
        student_logits = self.student(x)
        t = self.temperature
        soft = F.kl_div(
            F.log_softmax(student_logits / t, dim=-1),
            F.softmax(teacher_logits / t, dim=-1),
            reduction="batchmean",
        ) * (t * t)
        hard = F.cross_entropy(student_logits, labels)
        loss = self.alpha * soft + (1 - self.alpha) * hard
        return loss, teacher_logits.requires_grad


@corpus.builder(lambda: (rand(4, 8), ints(4, 4)))
def distillation_teacher_no_grad():
    return Distiller()


# ---------------------------------------------------------------------------------------
# modes, norms, autocast


class ConvNetBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((1, 1)),
        )
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.body(x), 1))


@corpus.builder(lambda: (rand(4, 3, 8, 8),), grad_modes=True)
def batchnorm_train_mode_running_stats():
    return ConvNetBN().train()


# capture gap: BatchNorm with momentum=None reads `float(num_batches_tracked)` (a cumulative
# average): a break, and the code after it is guarded on that count, so each call recompiles it
@corpus.builder(lambda: (rand(4, 3, 6, 6),), graphs=5, fullgraph=False)
def batchnorm_cumulative_average():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.ReLU()).train()


class TrainEvalToggle(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2)
        )

    def forward(self, x):
        self.net.train()
        train_out = self.net(x)
        self.net.eval()
        with torch.no_grad():
            eval_out = self.net(x)
        self.net.train()
        return train_out, eval_out


@corpus.builder(lambda: (rand(6, 8),), setup=lambda: torch.manual_seed(7))
def train_eval_toggled_inside_forward():
    return TrainEvalToggle()


def _evaluate(model, x):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train(was_training)
    return out


@corpus.program(
    lambda: (
        nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4)).train(),
        rand(5, 4),
    ),
    setup=lambda: torch.manual_seed(2),
    graphs=2,  # the harness passes a fresh copy of the model each call: guarded by identity
)
def evaluate_helper_restores_mode(model, x):
    train_out = model(x)
    eval_out = _evaluate(model, x)
    return train_out, eval_out, model.training


@corpus.builder(lambda: (rand(4, 8), ints(4, 4)))
def autocast_bf16_forward_fp32_loss():
    model = classifier()

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        return loss, logits.dtype

    return step


class AutocastTrainer(Trainer):
    def forward(self, data):
        out = []
        for x, y in data:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=True):
                logits = self.model(x)
                loss = F.cross_entropy(logits, y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            out.append(loss.detach())
        return torch.stack(out)


@corpus.builder(lambda: (batches(2),), graphs=3, fullgraph=False, rtol=1e-2, atol=1e-2)
def autocast_training_steps():
    return AutocastTrainer(classifier(), "sgd", lr=0.1)


# ---------------------------------------------------------------------------------------
# schedulers, frozen params, parametrize


class SchedTrainer(Trainer):
    def __init__(self):
        super().__init__(classifier(), "sgd", lr=0.5)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)

    def forward(self, data):
        lrs = []
        for x, y in data:
            loss = F.cross_entropy(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.sched.step()
            lrs.append(self.sched.get_last_lr()[0])
        return lrs


# (the eager side warns that optimizer.step was overridden: its deep copy loses the scheduler's
# wrapper of step; the compiled side, on the original, does not)
@corpus.builder(lambda: (batches(3),), graphs=5, fullgraph=False)
def step_lr_scheduler():
    return SchedTrainer()


def cosine_with_warmup(step, warmup=2, total=10, base_lr=0.1):
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupTrainer(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = classifier()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.global_step = 0

    def forward(self, x, y):
        lr = cosine_with_warmup(self.global_step)
        for group in self.opt.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.global_step += 1
        return {"loss": loss.detach(), "lr": lr, "step": self.global_step}


@corpus.builder(lambda: (rand(4, 8), ints(4, 4)), graphs=4, fullgraph=False)
def manual_lr_warmup_param_groups():
    return WarmupTrainer()


class FineTune(Trainer):
    def __init__(self):
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        for p in model[0].parameters():
            p.requires_grad = False
        super().__init__(model, "sgd", lr=0.1)
        self.opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)

    def forward(self, data):
        out = []
        for x, y in data:
            loss = F.cross_entropy(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            out.append(self.model[0].weight.grad is None)
        return out


@corpus.builder(lambda: (batches(2),), graphs=2, fullgraph=False)
def frozen_backbone_finetune():
    return FineTune()


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class ParametrizedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(5, 5)
        torch.nn.utils.parametrize.register_parametrization(self.layer, "weight", Symmetric())

    def forward(self, x):
        return self.layer(x).tanh()


@corpus.builder(lambda: (rand(3, 5),), graphs=1)
def parametrize_symmetric_weight():
    return ParametrizedLinear()


# ---------------------------------------------------------------------------------------
# data pipelines around the step


def batch_iterator(data, labels, batch_size):
    for start in range(0, data.shape[0], batch_size):
        yield {
            "input": data[start : start + batch_size],
            "labels": labels[start : start + batch_size],
        }


class LoopTrainer(Trainer):
    def __init__(self):
        super().__init__(classifier(), "sgd", lr=0.1)

    def forward(self, data, labels):
        history = []
        for _step, batch in enumerate(batch_iterator(data, labels, 4)):
            logits = self.model(batch["input"])
            loss = F.cross_entropy(logits, batch["labels"])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            history.append(round(loss.item(), 4))
        return history


@corpus.builder(lambda: (rand(8, 8), ints(4, 8)), graphs=3, fullgraph=False)
def generator_of_dict_batches():
    return LoopTrainer()


class LoggingTrainer(Trainer):
    def __init__(self):
        super().__init__(classifier(), "sgd", lr=0.1)

    def forward(self, data):
        running = 0.0
        for step, (x, y) in enumerate(data):
            loss = F.cross_entropy(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            running += round(loss.item(), 4)
            if step % 2 == 0:
                logger.info(f"step {step} | loss {running / (step + 1):.4f} | x {tuple(x.shape)}")
                print(
                    f"[train] step={step} batch={list(x.shape)} lr={self.opt.param_groups[0]['lr']}"
                )
        return running


@corpus.builder(lambda: (batches(3),), graphs=4, fullgraph=False, output=True)
def progress_logging_every_n_steps():
    return LoggingTrainer()


def augment(img):
    if random.random() < 0.5:
        img = torch.flip(img, dims=[-1])
    shift = random.randint(-1, 1)
    img = torch.roll(img, shifts=shift, dims=-2)
    noise_scale = random.uniform(0.0, 0.1)
    return img + noise_scale


# capture gap: `random.random()` is a C call, so each augmentation breaks; a compiler could run
# Python's `random` while tracing and guard on (or replay) the drawn values
@corpus.builder(
    lambda: (rand(4, 1, 6, 6), ints(3, 4)),
    setup=lambda: random.seed(0),
    # 3.12 inlines the list comprehension (PEP 709): `augment` is then called from the compiled
    # frame, so it is compiled on its own between its `random` calls (resume functions)
    graphs=(2, 3) if sys.version_info < (3, 12) else (2, 3, 11),
    fullgraph=False,
)
def random_augmentation_python_random():
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 3))

    def step(images, labels):
        images = torch.stack([augment(img) for img in images])
        loss = F.cross_entropy(model(images), labels)
        return loss

    return step


@corpus.program(lambda: (rand(4, 6), torch.tensor([3, 6, 2, 5])))
def dict_batch_masked_mean_pooling(hidden, lengths):
    batch = {"input_ids": hidden, "lengths": lengths}
    mask = torch.arange(batch["input_ids"].shape[1])[None, :] < batch["lengths"][:, None]
    masked = batch["input_ids"].masked_fill(~mask, 0.0)
    pooled = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    batch["pooled"] = pooled
    return batch


class RegressionTrainer(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.best = float("inf")

    def forward(self, x, y, epochs=2):
        for _epoch in range(epochs):
            pred = self.model(x).squeeze(-1)
            loss = F.mse_loss(pred, y)
            self.opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_value_(self.model.parameters(), 0.5)
            self.opt.step()
            if loss.item() < self.best:
                self.best = round(loss.item(), 4)
        return self.best


@corpus.builder(lambda: (rand(6, 3), rand(6)), graphs=3, fullgraph=False)
def regression_epochs_best_loss():
    return RegressionTrainer()


# a fresh copy of the model each call (the harness): guarded by identity, so 2 graphs per call
@corpus.program(lambda: (nn.Linear(4, 2), rand(3, 4), rand(3, 2)), graphs=4, fullgraph=False)
def grads_inspected_after_backward(model, x, target):
    model.zero_grad()
    loss = ((model(x) - target) ** 2).mean()
    loss.backward()
    grad_norms = {name: p.grad.norm() for name, p in model.named_parameters() if p.grad is not None}
    total_norm = torch.norm(torch.stack(list(grad_norms.values())), 2)
    return grad_norms, total_norm


@pytest.mark.parametrize("case", corpus.params())
def test_training(case):
    case.run()
