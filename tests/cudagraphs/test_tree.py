"""The graph-tree logic on the CPU stand-in recorder (or on real CUDA graphs under
`FRAMEJIT_TEST_DEVICE=cuda`), compared with eager on real tensors: warm-up, recording, replay,
paths, steps, overwritten outputs, limits and refusals."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from framejit.backend import lookup_backend
from framejit.cudagraphs import OverwrittenOutputError

import framejit
from framejit import cudagraphs
from framejit.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("stand_in")


def tree_manager() -> cudagraphs.CUDAGraphTreeManager:
    """The tree of the device the tests run on (the stand-in's CPU, or the GPU; conftest.py)."""
    if os.environ.get("FRAMEJIT_TEST_DEVICE", "cpu") == "cuda":
        return cudagraphs.managers()[torch.device("cuda", torch.cuda.current_device())]
    return cudagraphs.managers()[torch.device("cpu")]


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_inference_replays_one_recording(backend: str) -> None:
    model = mlp()
    fast = framejit.jit(model, backend=backend, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(3, 8)
            torch.testing.assert_close(fast(x), model(x))
    manager = tree_manager()
    assert manager.nodes == 1  # warm-up, one recording, then replays
    assert (manager.warm_ups, manager.replays, manager.eager_runs) == (1, 3, 0)
    (node,) = next(iter(manager.roots.values()))
    assert len(node.static_ptrs) == 4 and len(node.copies) == 1


def test_overwritten_output_raises_naming_function_and_remedy() -> None:
    model = mlp()
    fast = framejit.jit(model, mode="reduce-overhead")
    with torch.no_grad():
        fast(torch.randn(2, 8))  # warm-up
        first = fast(torch.randn(2, 8))  # recorded
        kept = first.clone()
        second = fast(torch.randn(2, 8))  # a new step: replays into first's memory
        with pytest.raises(OverwrittenOutputError) as info:
            print(first)
        message = str(info.value)
        assert "forward()" in message and "clone()" in message and "mark_step_begin" in message
        with pytest.raises(OverwrittenOutputError):
            first + 1
        assert not torch.equal(kept, second)  # the memory really holds the new values
        torch.testing.assert_close(second, model(_last_input(fast)))


def _last_input(fast: torch.nn.Module) -> torch.Tensor:
    (node,) = next(iter(tree_manager().roots.values()))
    return node.copies[0][1]


def test_a_view_of_an_old_output_keeps_its_values() -> None:
    model = mlp()
    fast = framejit.jit(model, mode="reduce-overhead")
    xs = [torch.randn(2, 8) for _ in range(4)]
    with torch.no_grad():
        fast(xs[0])
        views = [fast(x)[0] for x in xs[1:]]  # only views survive each call
        for x, view in zip(xs[1:], views):
            torch.testing.assert_close(view, model(x)[0])


def test_old_output_as_argument_and_within_one_step() -> None:
    model = torch.nn.Linear(8, 8)
    fast = framejit.jit(model, mode="reduce-overhead")
    with torch.no_grad():
        x = torch.randn(2, 8)
        for _ in range(4):  # each call reads the previous call's output
            expected = model(x)
            x = fast(x)
            torch.testing.assert_close(x, expected)


def test_mark_step_begin_lets_the_next_call_overwrite() -> None:
    fn = cudagraphs.cudagraphify(lambda x: (x * 2,), [torch.randn(3)], (), "double()")
    fn(torch.randn(3))  # warm-up
    a = fn(torch.ones(3))[0]  # recorded; a call from outside jit continues the step
    framejit.mark_step_begin()
    torch.testing.assert_close(a, torch.full((3,), 2.0))  # nothing ran yet
    fn(torch.zeros(3))
    with pytest.raises(OverwrittenOutputError, match="double"):
        a.sum()


def test_graph_break_pieces_form_a_path_and_share_outputs_in_place() -> None:
    lin1, lin2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def step(x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(lin1(x))
        framejit_break()
        return lin2(h) + 1

    fast = framejit.jit(step, mode="reduce-overhead", backend="eager")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 8)
            torch.testing.assert_close(fast(x), lin2(torch.relu(lin1(x))) + 1)
    manager = tree_manager()
    assert manager.nodes == 2
    (root,) = [n for nodes in manager.roots.values() for n in nodes]
    (child,) = [n for nodes in root.children.values() for n in nodes]
    assert child.parent is root and child.path_ptrs  # h used in place, not copied


@framejit.disable
def framejit_break() -> None:
    pass


def test_training_graph_cut_at_an_output_records_both_parts() -> None:
    # (features, logits): the AOT stage cuts the graph after the features, and the second
    # part's forward hands the features back as it is (it saves them for its backward): that
    # output has the first part's grad_fn, and is replayed as the call's own input
    torch.manual_seed(0)
    features, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def cam(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = features(x).tanh()
        return f, head(f)

    fast = framejit.jit(cam, mode="reduce-overhead", backend="aot_eager")
    params = [*features.parameters(), *head.parameters()]
    for _ in range(4):
        x = torch.randn(5, 8)
        results = []
        for fn in (fast, cam):
            f, logits = fn(x)
            f.retain_grad()
            logits[:, 1].sum().backward()
            results.append([f.grad, *(p.grad for p in params)])
            for p in params:
                p.grad = None
        for got, want in zip(*results):
            torch.testing.assert_close(got, want)
    manager = tree_manager()
    assert manager.nodes == 4 and manager.eager_runs == 0  # two forwards, two backwards


def test_training_forward_and_backward_on_one_path() -> None:
    model = mlp()
    reference = copy.deepcopy(model)
    fast = framejit.jit(model, mode="reduce-overhead", backend="aot_eager")
    for _ in range(4):
        x, target = torch.randn(5, 8), torch.randn(5, 4)
        torch.nn.functional.mse_loss(fast(x), target).backward()
        torch.nn.functional.mse_loss(reference(x), target).backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    manager = tree_manager()
    assert manager.nodes == 2
    # warm-up and recording of the forward and the backward, then both replay twice
    assert (manager.warm_ups, manager.replays, manager.eager_runs) == (2, 4, 0)
    (forward,) = next(iter(manager.roots.values()))
    (backward,) = next(iter(forward.children.values()))
    assert forward.function.kind == "forward" and backward.function.kind == "backward"
    assert backward.path_ptrs  # saved activations read where the forward wrote them


def _output_held_by_autograd() -> tuple:
    """A recorded call's output that autograd saves: (model, fast, w, x1, loss)."""
    model = torch.nn.Linear(4, 4)
    fast = framejit.jit(model, mode="reduce-overhead")
    w = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        fast(torch.randn(2, 4))  # warm-up
        x1 = torch.randn(2, 4)
        y1 = fast(x1)  # recorded
    loss = (y1 * w).sum()  # mul saves y1 for the gradient of w
    return model, fast, w, x1, loss


def test_output_saved_by_autograd_is_preserved() -> None:
    model, fast, w, x1, loss = _output_held_by_autograd()
    with torch.no_grad():
        fast(torch.randn(2, 4))  # overwrites y1's graph memory
    loss.backward()
    with torch.no_grad():
        torch.testing.assert_close(w.grad, model(x1).sum(0))


def test_moved_parameter_rerecords_then_gives_up(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.config.cudagraph_rerecord_limit = 1
    framejit.set_logs(cudagraphs=True)
    model = torch.nn.Linear(4, 4)
    fast = framejit.jit(model, mode="reduce-overhead")
    old = []  # kept alive, so the allocator cannot hand a recorded address back
    with torch.no_grad():
        for _ in range(5):
            old.append(model.weight.data)
            model.weight.data = model.weight.data.clone()  # same Parameter, new memory
            x = torch.randn(2, 4)
            torch.testing.assert_close(fast(x), model(x))
    err = capsys.readouterr().err
    assert "static input" in err and "moved" in err
    assert "cudagraph_rerecord_limit=1" in err and "runs as it is" in err
    assert tree_manager().nodes == 2


def test_more_shapes_than_the_limit_run_without_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.config.cudagraph_max_shapes = 2
    framejit.set_logs(cudagraphs=True)
    fn = cudagraphs.cudagraphify(lambda x: x.sin(), [torch.randn(1)], (), "sin()")
    for n in [1, 1, 2, 2, 3, 3, 1]:
        x = torch.randn(n)
        torch.testing.assert_close(fn(x), x.sin())
    assert "cudagraph_max_shapes=2" in capsys.readouterr().err
    assert fn.refused is not None and tree_manager().nodes == 2


def test_refusals_run_normally_and_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(cudagraphs=True)

    def mutates(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    fast = framejit.jit(mutates, mode="reduce-overhead", backend="eager")
    x, y = torch.zeros(3), torch.zeros(3)
    for _ in range(3):
        torch.testing.assert_close(fast(x), mutates(y))
        torch.testing.assert_close(x, y)
    cudagraphs.reset()  # a fresh tree for callables used without jit
    syncing = cudagraphs.cudagraphify(lambda x: (x.nonzero(),), [torch.ones(3)], (), "nz()")
    for _ in range(3):
        torch.testing.assert_close(syncing(torch.ones(3))[0], torch.ones(3).nonzero())
    err = capsys.readouterr().err
    assert "writes to input 0" in err
    assert "not graphing nz()" in err and "aten::nonzero" in err


def test_an_op_a_capture_refuses_is_found_at_the_warm_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No capture is tried for it: on CUDA a failed capture leaves torch's state behind."""
    framejit.set_logs(cudagraphs=True)
    fn = cudagraphs.cudagraphify(
        lambda x: (x * x.sum().item(),), [torch.ones(3)], (), "scaled_by_item()"
    )
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(fn(x)[0], x * x.sum().item())
    manager = tree_manager()
    assert manager.serial == 0  # no recording was begun
    assert manager.nodes == 0 and manager.warm_ups == 1 and manager.eager_runs == 2
    err = capsys.readouterr().err
    assert "not graphing scaled_by_item()" in err and "aten::_local_scalar_dense" in err


@pytest.mark.stand_in_only
def test_cpu_tensors_are_refused_without_the_stand_in(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(cudagraphs=True)
    with cudagraphs.stand_in():
        pass
    cudagraphs._stand_in = False
    try:
        fn = lambda x: x + 1  # noqa: E731
        assert cudagraphs.cudagraphify(fn, [torch.ones(2)]) is fn
    finally:
        cudagraphs._stand_in = True
    assert "CPU tensors" in capsys.readouterr().err


def test_reset_frees_the_trees_and_settles_live_outputs() -> None:
    fast = framejit.jit(torch.nn.Linear(4, 4), mode="reduce-overhead")
    with torch.no_grad():
        fast(torch.randn(1, 4))
        y = fast(torch.randn(1, 4))
    assert cudagraphs.managers()
    framejit.reset()
    assert not cudagraphs.managers()
    with pytest.raises(OverwrittenOutputError):
        y.sum()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="callable"):
        cudagraphs.cudagraphify(3, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        cudagraphs.cudagraphify(abs, [torch.ones(1)], kind="sideways")
    with pytest.raises(ValueError, match="static_indices"):
        cudagraphs.cudagraphify(abs, [torch.ones(1)], static_indices=[3])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_dynamic_shapes_record_one_graph_per_size(backend: str) -> None:
    model = mlp()
    counter = CompileCounter()
    inner = lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    fast = framejit.jit(model, backend=counting, mode="reduce-overhead", dynamic=True)
    with torch.no_grad():
        for b in (3, 5, 3, 5, 7, 3):
            x = torch.randn(b, 8)
            torch.testing.assert_close(fast(x), model(x))
    assert counter.frame_count == 1  # one compiled graph serves every batch size
    assert tree_manager().nodes == 3  # one recording per distinct size


def test_max_autotune_reaches_the_triton_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    import framejit.backend.triton as triton_backend

    seen: list[object] = []

    def recording_compile_graph(gm: torch.fx.GraphModule, inputs: list, options=None) -> object:
        seen.append(options)
        return gm.forward

    monkeypatch.setattr(triton_backend, "compile_graph", recording_compile_graph)
    model = mlp()
    fast = framejit.jit(model, backend="triton", mode="max-autotune")
    with torch.no_grad():
        x = torch.randn(3, 8)
        torch.testing.assert_close(fast(x), model(x))
    assert seen == [{"max_autotune": True}]


def _chain() -> tuple:
    f = cudagraphs.cudagraphify(
        lambda x: ((x * 2).sin(), x[:4].cos()), [torch.randn(64)], (), "f()"
    )
    g = cudagraphs.cudagraphify(lambda h: ((h + 1).cos(),), [torch.randn(64)], (), "g()")
    k = cudagraphs.cudagraphify(lambda h: ((h * 3).exp(),), [torch.randn(64)], (), "k()")
    return f, g, k


def _path_nodes() -> list[cudagraphs.Node]:
    (root,) = [n for nodes in tree_manager().roots.values() for n in nodes]
    path = [root]
    while path[-1].children:
        (child,) = [n for nodes in path[-1].children.values() for n in nodes]
        path.append(child)
    return path


def test_dead_outputs_memory_is_reused_by_later_recordings() -> None:
    f, g, k = _chain()
    for _ in range(5):
        x = torch.randn(64)
        h = f(x)[0]  # the second output dies at once
        (h,) = g(h)  # f's first output dies here
        (y,) = k(h)
        torch.testing.assert_close(y, (((x * 2).sin() + 1).cos() * 3).exp())
    f_node, g_node, k_node = _path_nodes()
    # k's output went into the memory of f's first output, dead by the time k was recorded
    assert k_node.blocks[0].ptr == f_node.blocks[0].ptr
    assert f_node.blocks[0].storage is None and f_node.blocks[0].released == g_node.serial + 1
    assert f_node.blocks[1].released == g_node.serial  # dead when g was recorded
    assert g_node.blocks[0].storage is not None  # read by k: never released while live
    assert tree_manager().released_bytes >= 64 * 4


def test_outputs_kept_alive_in_reused_memory_keep_their_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    f, g, k = _chain()
    for _ in range(3):  # warm-up, record (releasing f's memory), replay
        x = torch.randn(64)
        h = f(x)[0]
        (h,) = g(h)
        k(h)
    framejit.set_logs(cudagraphs=True)
    x = torch.randn(64)
    h, small = f(x)  # this time both outputs of f stay alive across g and k
    (h2,) = g(h)
    (y,) = k(h2)
    torch.testing.assert_close(h, (x * 2).sin())
    torch.testing.assert_close(small, x[:4].cos())
    torch.testing.assert_close(y, (((x * 2).sin() + 1).cos() * 3).exp())
    assert "copied an output of f()" in capsys.readouterr().err


def test_a_new_recording_does_not_write_over_live_outputs_in_released_memory() -> None:
    f, g, _ = _chain()
    m = cudagraphs.cudagraphify(lambda h: ((h - 1).abs(),), [torch.randn(64)], (), "m()")
    for _ in range(2):  # warm-up, then f and g recorded: f's small output released
        x = torch.randn(64)
        h = f(x)[0]
        g(h)
    for _ in range(2):  # m warms up, then is recorded while f's small output is alive
        x = torch.randn(64)
        h, small = f(x)
        (y,) = m(h)
        torch.testing.assert_close(small, x[:4].cos())
        torch.testing.assert_close(y, ((x * 2).sin() - 1).abs())
    assert tree_manager().nodes == 3


def test_recordings_for_other_shapes_reuse_dead_outputs() -> None:
    fn = cudagraphs.cudagraphify(lambda x: (x.sin() * 2,), [torch.randn(1)], (), "sin2()")
    manager = None
    for n in [64, 64, 32, 16, 64, 32, 16, 64, 32, 16]:
        x = torch.randn(n)
        (y,) = fn(x)
        torch.testing.assert_close(y, x.sin() * 2)
        manager = tree_manager()
        del y
    assert manager is not None and manager.nodes == 3
    owned = [b for node in manager.all_nodes for b in node.blocks if b.storage is not None]
    ptrs = {b.ptr for node in manager.all_nodes for b in node.blocks}
    assert len(ptrs) == 1  # the 32 and 16 element recordings write into the 64 element memory
    assert sum(b.nbytes for b in owned) <= 64 * 4


def test_graph_break_pieces_reuse_memory_and_match_eager() -> None:
    lin1, lin2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
    seen = []

    @framejit.disable
    def observe(t: torch.Tensor) -> None:
        seen.append(float(t.sum()))

    def step(x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(lin1(x))
        observe(h * 2)  # a graph output that dies once the break ran
        return torch.tanh(lin2(h)) + 1

    fast = framejit.jit(step, mode="reduce-overhead", backend="eager")
    kept = []
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(4, 16)
            y = fast(x)
            torch.testing.assert_close(y, step(x))
            torch.testing.assert_close(seen[-2], seen[-1])
            kept.append((x, y.clone()))
    assert tree_manager().nodes == 2
    first, second = _path_nodes()
    released = [b for b in first.blocks if b.released is not None]
    assert released  # `h * 2` was given back to the pool once `observe` returned
    # the second piece's output went where `h * 2` was: the stand-in's pool hands the first
    # free block out (CUDA's allocator picks its own)
    if os.environ.get("FRAMEJIT_TEST_DEVICE", "cpu") != "cuda":
        assert second.blocks[0].ptr in {b.ptr for b in released}
    with torch.no_grad():
        for x, y in kept:
            torch.testing.assert_close(y, step(x))


def test_without_a_storage_swap_held_outputs_keep_their_values(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch 2.11 has no UntypedStorage._swap_data_ptr_; without framejit's C++ extension an
    old output that autograd holds cannot get its own copy: calls run without graphs while it
    lives, and no memory is released for reuse."""
    from framejit.cudagraphs import outputs, tree

    monkeypatch.setattr(outputs, "_swap", None)
    monkeypatch.setattr(tree, "CAN_PRESERVE", False)
    framejit.set_logs(cudagraphs=True)
    model, fast, w, x1, loss = _output_held_by_autograd()
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(fast(x), model(x))
    loss.backward()
    with torch.no_grad():
        torch.testing.assert_close(w.grad, model(x1).sum(0))
    del loss
    with torch.no_grad():
        x = torch.randn(2, 4)
        torch.testing.assert_close(fast(x), model(x))  # graphs again
    assert tree_manager().released_bytes == 0
    assert "calls run without graphs until it dies" in capsys.readouterr().err


def test_storage_swap_is_available_here() -> None:
    """On torch 2.13 through torch's own method, on older torch through framejit's C++
    extension (built by `pip install --no-build-isolation`)."""
    from framejit.cudagraphs import outputs

    assert outputs.CAN_PRESERVE
    a, b = torch.arange(4.0), torch.zeros(4)
    view = a[1:]
    outputs._swap(a.untyped_storage(), b.untyped_storage())
    torch.testing.assert_close(view, torch.zeros(3))
    torch.testing.assert_close(b, torch.arange(4.0))


def test_an_internal_error_at_run_time_is_reported_not_hidden(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in framejit's run-time code (here: the storage swap missing, as torch 2.11's was)
    must not pass unseen behind the eager rerun: it raises under raise_internal_errors (as in
    these tests) and is logged as a warning otherwise, while the call still gets eager's answer."""
    from framejit.cudagraphs import outputs

    # a swap that cannot be called with the storages: the TypeError is raised in outputs.py
    monkeypatch.setattr(outputs, "_swap", lambda storage: None)
    model, fast, w, x1, loss = _output_held_by_autograd()
    with torch.no_grad(), pytest.raises(TypeError):
        fast(torch.randn(2, 4))
    framejit.config.raise_internal_errors = False
    with torch.no_grad(), caplog.at_level("WARNING"):
        x = torch.randn(2, 4)
        torch.testing.assert_close(fast(x), model(x))
    assert "internal error at" in caplog.text and "outputs.py" in caplog.text


def _views_and_dtypes(x: torch.Tensor) -> tuple:
    y = torch.tanh(x) * 2
    return y, y[1:, ::2], (x > 0), y.t(), x.sum()


@pytest.mark.parametrize("path", ["extension", "python"])
def test_replays_hand_out_eager_layouts_over_shared_storage(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Outputs of one replay over one storage stay views of one storage, with eager's sizes,
    strides, offsets and dtypes, whichever way the tensors are made (tree.py, Node.hand_out)."""
    from framejit.cudagraphs import tree

    if path == "python":
        monkeypatch.setattr(tree, "_alias_outputs", None)
    elif tree._alias_outputs is None:
        pytest.skip("framejit's C++ extension is not built here")
    fast = framejit.jit(_views_and_dtypes, backend="aot_eager", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(5, 6)
            got, expected = fast(x), _views_and_dtypes(x)
            for g, e in zip(got, expected):
                assert (g.dtype, g.shape, g.stride()) == (e.dtype, e.shape, e.stride())
                torch.testing.assert_close(g, e)
            assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()
            assert got[1].storage_offset() == 6 and not got[0].requires_grad
    assert tree_manager().replays == 2


def test_inference_mode_replays_and_hands_out_inference_tensors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls under inference mode are recorded and replayed, and hand out inference tensors,
    as eager would; a replay outside it hands out ordinary tensors that autograd can save,
    whichever mode came first."""
    from framejit.cudagraphs import tree

    monkeypatch.setattr(tree, "_PROTOTYPES", {})
    model = mlp()
    infer = framejit.jit(copy.deepcopy(model), backend="aot_eager", mode="reduce-overhead")
    with torch.inference_mode():
        for _ in range(4):
            x = torch.randn(3, 8)
            out = infer(x)
            assert out.is_inference()
            torch.testing.assert_close(out, model(x))
    # replayed: inference tensors have no version counter, and the warm-up's check that the
    # function does not write its inputs once failed on them, so nothing was ever recorded
    assert (tree_manager().warm_ups, tree_manager().replays) == (1, 2)
    framejit.mark_step_begin()
    reference = copy.deepcopy(model)
    train = framejit.jit(model, backend="aot_eager", mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(3, 8)
        out = train(x)
        assert not out.is_inference()
        (out * out).sum().backward()
        (reference(x) ** 2).sum().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None


def test_a_function_writing_an_inference_tensor_input_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without a version counter, the warm-up compares a copy of the input: a function that
    writes it is refused (a replay would write the recording's own input buffer instead)."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    fast = framejit.jit(fn, backend="eager", mode="reduce-overhead")
    with torch.inference_mode():
        for _ in range(3):
            x = torch.randn(4)
            expected = fn(x.clone())
            torch.testing.assert_close(fast(x), expected)
            torch.testing.assert_close(x, expected / 2)
    assert any("writes to input 0" in r for r in tree_manager().refusals)
