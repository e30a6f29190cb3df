"""A program whose compile starts a thread that runs tensor code (a backend that warms up in a
worker, as progress bars and profilers do), with module constructors and an enum-keyed table.
Run with and without the hook; the output must match."""

import enum
import threading

import torch

import framejit


def worker_step(t):
    return t * 2 + 1


def threaded_backend(gm, example_inputs):
    done = []
    thread = threading.Thread(target=lambda: done.append(worker_step(torch.ones(2))))
    thread.start()
    thread.join()  # the compiling thread waits for one whose first frames reach the hook
    assert done and torch.equal(done[0], torch.full((2,), 3.0))
    return gm.forward


framejit.register_backend("threaded_test", threaded_backend)


class Mode(str, enum.Enum):  # noqa: UP042  (a str enum on purpose, as libraries write them)
    FAST = "fast"
    SLOW = "slow"


SCALE = {Mode.FAST: 2.0, Mode.SLOW: 0.5}


class Net(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x, mode):
        return torch.relu(self.fc(x)) * SCALE[mode]


torch.manual_seed(0)
net = Net(4)
x = torch.randn(3, 4)
with framejit.enabled(backend="threaded_test"):
    for mode in (Mode.FAST, Mode.SLOW, Mode.FAST):
        print(mode.value, [round(v, 4) for v in net(x, mode).sum(0).tolist()])
