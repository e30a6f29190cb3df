"""Python side effects in compiled code: they must happen exactly as they do in eager.

Attribute writes on objects and modules passed in, list and dict updates on inputs, global
and nonlocal counters, `logging` and `warnings` calls, objects made inside and returned or
stored on an input, module buffers updated in train mode (BatchNorm running statistics),
step counters on modules. Every case compares what the program logs, warns and prints with
eager (`output=True`); global state is reset before each call (`setup`) and compared after
it (`observe`).
"""

import collections
import dataclasses
import logging
import warnings

import pytest
import torch
import torch.nn.functional as F
from harness import Corpus, call, ints, rand
from torch import nn

corpus = Corpus(output=True)

log = logging.getLogger("corpus.side_effects")


# --- attribute writes on objects passed in --------------------------------------------


class State:
    def __init__(self):
        self.step = 0
        self.last = None
        self.name = "state"


@corpus.program(lambda: (rand(3), State()))
def counter_on_object(x, state):
    state.step += 1
    return x * state.step


@corpus.program(lambda: (rand(3), State()))
def store_tensor_on_object(x, state):
    y = x.relu()
    state.last = y
    return y + 1


@corpus.program(lambda: (rand(3), State()))
def new_attribute_on_object(x, state):
    state.cache = {"sq": x * x}
    state.name = state.name + "_used"
    return state.cache["sq"].sum()


@corpus.program(lambda: (rand(3), State()))
def read_after_write(x, state):
    state.step = 5
    state.step = state.step * 2
    return x + state.step


# capture gap: `del obj.attr` (DELETE_ATTR) runs the whole frame eagerly
@corpus.program(lambda: (rand(3), State()), graphs=(0, 1), fullgraph=False)
def delete_attribute(x, state):
    state.tmp = x * 2
    out = state.tmp + 1
    del state.tmp
    return out


@dataclasses.dataclass
class RunningStats:
    count: int = 0
    total: float = 0.0
    history: list = dataclasses.field(default_factory=list)


@corpus.program(lambda: (rand(4), RunningStats()))
def dataclass_state_updates(x, stats):
    stats.count += x.shape[0]
    stats.history.append(x.mean())
    return x - stats.history[-1]


@corpus.program(lambda: (rand(4), State(), State()))
def two_objects_swapped_values(x, a, b):
    a.step, b.step = b.step + 1, a.step + 2
    return x * a.step + b.step


# --- lists and dicts passed in --------------------------------------------------------


@corpus.program(lambda: (rand(3), []))
def append_to_input_list(x, outputs):
    outputs.append(x * 2)
    outputs.append(x.sum())
    return len(outputs)


@corpus.program(lambda: (rand(3), [rand(3)]))
def extend_input_list(x, feats):
    feats.extend([x, x.sin()])
    return torch.stack(feats).sum(0)


@corpus.program(lambda: (rand(3), [rand(3), rand(3), rand(3)]))
def pop_from_input_list(x, queue):
    first = queue.pop(0)
    last = queue.pop()
    return x + first - last, len(queue)


@corpus.program(lambda: (rand(3), {"a": rand(3)}))
def update_input_dict(x, cache):
    cache["b"] = x * 3
    cache.update(c=x + 1)
    return cache["a"] + cache["b"]


@corpus.program(lambda: (rand(3), {"a": rand(3), "b": rand(3)}))
def pop_from_input_dict(x, cache):
    a = cache.pop("a")
    missing = cache.pop("zzz", None)
    return x + a, missing is None


@corpus.program(lambda: (rand(3), {}))
def setdefault_on_input_dict(x, cache):
    buf = cache.setdefault("buf", [])
    buf.append(x + 1)
    return cache["buf"][0] * 2


@corpus.program(lambda: (rand(3), [rand(3), rand(3)]))
def item_assignment_in_input_list(x, params):
    params[0] = params[0] - 0.1 * x
    params[1] = x
    return params[0] + params[1]


@corpus.program(lambda: (rand(3), [1, 2, 3]))
def insert_and_clear_python_list(x, xs):
    xs.insert(0, 0)
    total = sum(xs)
    xs.clear()
    return x * total


@corpus.program(lambda: (rand(3), {"seen": 0}))
def counter_in_input_dict(x, stats):
    stats["seen"] += 1
    stats["shape"] = tuple(x.shape)
    return x * stats["seen"]


@corpus.program(lambda: (rand(3), collections.defaultdict(list)))
def defaultdict_passed_in(x, buckets):
    buckets["even"].append(x * 2)
    buckets["odd"].append(x * 3)
    return buckets["even"][0] + buckets["odd"][0]


# capture gap: deque.append on an input runs the whole frame eagerly
@corpus.program(lambda: (rand(3), collections.deque(maxlen=2)), graphs=(0, 1), fullgraph=False)
def bounded_deque_history(x, history):
    history.append(x.shape[0])
    history.append(x.shape[0] * 2)
    history.append(x.shape[0] * 3)
    return x * sum(history)


@corpus.program(lambda: (rand(2, 3), []))
def list_sort_in_place(x, log_lines):
    log_lines.append("b")
    log_lines.append("a")
    log_lines.sort()
    return x * len(log_lines)


# --- globals --------------------------------------------------------------------------

CALLS = 0
TOTALS = {"n": 0}
HISTORY: list = []


def _reset_globals():
    global CALLS
    CALLS = 0
    TOTALS.clear()
    TOTALS["n"] = 0
    HISTORY.clear()


def _globals_state():
    return CALLS, dict(TOTALS), list(HISTORY)


@corpus.program(lambda: (rand(3),), setup=_reset_globals, observe=_globals_state)
def global_counter(x):
    global CALLS
    CALLS += 1
    return x * CALLS


@corpus.program(lambda: (rand(3),), setup=_reset_globals, observe=_globals_state)
def global_dict_and_list(x):
    TOTALS["n"] += x.shape[0]
    HISTORY.append(x.sum())
    return x + TOTALS["n"]


@corpus.program(lambda: (rand(3),), setup=_reset_globals, observe=_globals_state)
def global_rebound_to_tensor(x):
    global CALLS
    CALLS = x.shape[0] * 2
    return x.mean() * CALLS


def _bump():
    global CALLS
    CALLS += 10


@corpus.program(lambda: (rand(3),), setup=_reset_globals, observe=_globals_state)
def global_written_by_helper(x):
    _bump()
    _bump()
    return x - CALLS


# --- nonlocal counters ----------------------------------------------------------------


def _make_counter():
    count = 0

    def step(x):
        nonlocal count
        count += 1
        return x * count

    return step


@corpus.builder(lambda: (rand(3),), separate_eager=True, graphs=(1, 2))
def nonlocal_counter_closure():
    return _make_counter()


def _make_ema(decay=0.5):
    avg = None

    def update(x):
        nonlocal avg
        avg = x if avg is None else decay * avg + (1 - decay) * x
        return avg

    return update


@corpus.builder(lambda: (rand(3),), separate_eager=True, graphs=(1, 2))
def nonlocal_ema_closure():
    return _make_ema()


def _make_recorder():
    seen = []

    def record(x):
        seen.append(x.shape[0])
        return x * len(seen)

    return record


@corpus.builder(lambda: (rand(3),), separate_eager=True, graphs=(1, 2))
def closure_list_append():
    return _make_recorder()


# --- logging and warnings -------------------------------------------------------------


@corpus.program(lambda: (rand(3),))
def logger_info_with_args(x):
    y = x * 2
    log.info("scaled input of shape %s by %d", tuple(x.shape), 2)
    return y


@corpus.program(lambda: (rand(3),))
def logger_warning_and_debug(x):
    if x.ndim == 1:
        log.warning("got a %dD input; adding a batch dim", x.ndim)
        x = x.unsqueeze(0)
    log.debug("done")
    return x


@corpus.program(lambda: (rand(3),), output=True)
def named_logger_from_get_logger(x):
    logger = logging.getLogger("corpus.side_effects.inner")
    logger.info("start")
    y = x.exp()
    logger.info("end %s", "ok")
    return y


@corpus.program(lambda: (rand(3),))
def logging_module_function(x):
    logging.info("root logger message %d", 7)
    return x + 1


@corpus.program(lambda: (rand(3),))
def warnings_warn_user_warning(x):
    if x.dtype != torch.float64:
        warnings.warn("computing in float32; precision may suffer", stacklevel=2)
    return x * 3


@corpus.program(lambda: (rand(3),))
def warnings_warn_deprecation(x, old_arg=None):
    if old_arg is None:
        warnings.warn("old_arg is deprecated", DeprecationWarning, stacklevel=2)
    return x.sum()


@corpus.program(lambda: (rand(3),))
def logging_and_warning_interleaved(x):
    log.info("one")
    warnings.warn("two", RuntimeWarning, stacklevel=1)
    log.warning("three %s", "!")
    return x.abs()


@corpus.program(lambda: (rand(3), ints(4, 3)))
def logger_with_fstring_of_shapes(x, y):
    log.info(f"x={tuple(x.shape)} y.dtype={y.dtype}")
    return x * y


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.logger = logging.getLogger("corpus.model")

    def forward(self, x):
        self.logger.debug("forward with batch %d", x.shape[0])
        return self.lin(x)


@corpus.builder(lambda: (rand(2, 4),))
def module_logs_in_forward():
    return Model()


# --- objects created inside -----------------------------------------------------------


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: torch.Tensor = None
    extras: dict = dataclasses.field(default_factory=dict)


# capture gap: a dataclass with a default_factory field made inside breaks the graph
@corpus.program(lambda: (rand(3, 4), ints(4, 3)), graphs=(1, 2))
def dataclass_output_created_inside(x, labels):
    out = Output(logits=x * 2)
    out.loss = F.cross_entropy(out.logits, labels)
    out.extras["norm"] = x.norm()
    return out


@corpus.program(lambda: (rand(3), State()))
def object_created_and_stored_on_input(x, state):
    inner = State()
    inner.last = x + 1
    state.child = inner
    return inner.last * 2


@corpus.program(lambda: (rand(3), []))
def dict_created_and_appended_to_input(x, records):
    rec = {"mean": x.mean(), "max": x.max()}
    records.append(rec)
    return rec["mean"] + rec["max"]


# --- modules: buffers, counters, train mode -------------------------------------------


@corpus.builder(lambda: (rand(6, 3),), grad_modes=True)
def batchnorm_train_updates_running_stats():
    return nn.BatchNorm1d(3).train()


# capture gap: float(num_batches_tracked) in BatchNorm (momentum=None) is guarded by value
@corpus.builder(lambda: (rand(4, 2, 5, 5),), graphs=(2, 3))
def batchnorm2d_train_momentum_none():
    return nn.BatchNorm2d(2, momentum=None).train()


class ConvBNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x))).mean((2, 3))


@corpus.builder(lambda: (rand(3, 1, 6, 6),), grad_modes=True)
def conv_bn_train_mode():
    return ConvBNNet().train()


class EMANorm(nn.Module):
    def __init__(self, dim, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("num_batches", torch.tensor(0))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * x.mean(0))
                self.num_batches += 1
            mean = x.mean(0)
        else:
            mean = self.running_mean
        return x - mean


@corpus.builder(lambda: (rand(5, 4),), grad_modes=True)
def ema_buffer_update_train():
    return EMANorm(4).train()


@corpus.builder(lambda: (rand(5, 4),))
def ema_buffer_read_eval():
    m = EMANorm(4)
    m.running_mean.uniform_()
    return m.eval()


class StepCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.steps = 0
        self.last_shape = None

    def forward(self, x):
        self.steps += 1
        self.last_shape = tuple(x.shape)
        return self.lin(x) * self.steps, self.steps, self.last_shape


@corpus.builder(lambda: (rand(2, 3),), graphs=(1, 2))
def python_step_counter_on_module():
    return StepCounter()


class CachedProjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.cache = None

    def forward(self, x):
        out = self.proj(x)
        self.cache = out.detach()
        return out


@corpus.builder(lambda: (rand(2, 3),), grad_modes=True)
def module_caches_detached_activation():
    return CachedProjection()


class FeatureHookByHand(nn.Module):
    """Stores intermediate features in a dict attribute, like a feature extractor."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)
        self.features = {}

    def forward(self, x):
        h = self.a(x)
        self.features["a"] = h
        out = self.b(h.relu())
        self.features["b"] = out
        return out, len(self.features)


@corpus.builder(lambda: (rand(3, 4),), graphs=(1, 2))
def module_stores_features_in_dict():
    return FeatureHookByHand()


class InPlaceBufferCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(1))
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        self.seen += x.shape[0]
        return self.lin(x) + self.seen


@corpus.builder(lambda: (rand(3, 2),), grad_modes=True)
def buffer_counter_in_place():
    return InPlaceBufferCounter()


# capture gap (minor): a module passed as an argument is guarded by identity, so each
# new module object recompiles
@corpus.program(lambda: (rand(3), nn.Linear(3, 3)), graphs=(1, 2))
def module_passed_in_gets_attribute(x, layer):
    layer.calls = getattr(layer, "calls", 0) + 1
    return layer(x)


@corpus.program(lambda: (rand(4, 3), nn.BatchNorm1d(3)), grad=False, graphs=(1, 2))
def batchnorm_passed_in_train_mode(x, bn):
    return bn(x) * 2


@corpus.program(lambda: (rand(3), nn.Linear(3, 3)), grad=False, graphs=(1, 2))
def parameter_updated_in_place_sgd_style(x, layer):
    loss_grad = x.unsqueeze(0).expand(3, 3)
    layer.weight.sub_(0.1 * loss_grad)
    return layer(x)


@corpus.program(lambda: (rand(3), State()))
def train_flag_toggled_on_object(x, state):
    state.training = False
    y = x * 2 if not state.training else x
    state.training = True
    return y


@corpus.program(lambda: call(rand(3), trace=[]))
def keyword_list_appended(x, trace=None):
    if trace is not None:
        trace.append("forward")
        trace.append(x.shape[0])
    return x + 1


@corpus.program(lambda: (rand(3), [rand(3)]))
def inplace_add_to_input_list(x, acc):
    acc += [x * 2, x * 3]
    return len(acc)


# capture gap: the setattr() builtin is a graph break
@corpus.program(lambda: (rand(3), State()), fullgraph=False)
def setattr_builtin_on_object(x, state):
    for name in ("alpha", "beta"):
        setattr(state, name, x.shape[0])
    return x * state.alpha + state.beta


GLOBAL_BUFFER = torch.zeros(3)


def _reset_buffer():
    GLOBAL_BUFFER.zero_()


@corpus.program(lambda: (rand(3),), setup=_reset_buffer, observe=lambda: GLOBAL_BUFFER.clone())
def global_tensor_updated_in_place(x):
    GLOBAL_BUFFER.add_(x)
    return GLOBAL_BUFFER * 2


def _check_shape(t, expected):
    if t.shape[-1] != expected:
        warnings.warn(f"last dim {t.shape[-1]} != {expected}", stacklevel=2)


@corpus.program(lambda: ([rand(2, 3), rand(2, 4), rand(2, 3)],))
def warnings_from_helper_in_loop(xs):
    total = 0
    for t in xs:
        _check_shape(t, 3)
        total = total + t.sum()
    return total


class LossTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 1)
        self.batches = []

    def forward(self, x, y):
        loss = F.mse_loss(self.head(x), y)
        self.batches.append(x.shape[0])
        return loss


@corpus.builder(lambda: (rand(4, 3), rand(4, 1)), graphs=(1, 2), grad_modes=True)
def module_appends_to_its_list():
    return LossTracker()


class Toggle(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.drop.eval()
        return self.drop(self.lin(x))


# capture gap: calling .eval() on a submodule inside forward runs the forward eagerly
@corpus.builder(lambda: (rand(2, 3),), graphs=(0, 1, 2))
def submodule_switched_to_eval_inside_forward():
    return Toggle()


@pytest.mark.parametrize("case", corpus.params())
def test_side_effects(case):
    case.run()
