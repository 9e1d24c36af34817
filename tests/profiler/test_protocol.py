"""The worker's typed protocol: every message crosses a pipe as itself, and the worker
answers each request with the replies its docstring lists (in this process, no pipe)."""

from __future__ import annotations

import pickle
from multiprocessing import Pipe

import pytest

from batchscope.hardware.types import Ceilings
from batchscope.profiler.protocol import (
    BatchDone,
    BuffersKept,
    CeilingsMeasured,
    ContractError,
    GridTimed,
    KeepBuffers,
    LoadOom,
    MeasureBatch,
    MeasureCeilings,
    Phase,
    ProbesTimed,
    Ready,
    Reply,
    Request,
    RunProbes,
    StopWorker,
    Timed,
    TimeGridPoint,
)
from batchscope.profiler.supervisor import load_oom_message
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import (
    BatchResult,
    Flag,
    FlagKind,
    GridPoint,
    ModelInfo,
    PeakMemoryMethod,
    Status,
)
from batchscope.records.probe import ProbeSpec
from batchscope.records.report import Mode, TrainingStep
from tests.conftest import MODELS

CEILINGS = Ceilings(device="cpu", name="t", peak_flops_per_s={"float32": 1e11},
                    bandwidth_bytes_per_s=2e10, overhead_s=1e-6)
REQUESTS: list[Request] = [
    MeasureCeilings(recalibrate=True), MeasureBatch(8, first_step=True, op_breakdown=False),
    TimeGridPoint(4, 128), RunProbes([ProbeSpec.of("mm", [[2, 2], [2, 2]])], 1 << 20, 0.5),
    KeepBuffers(), StopWorker()]
REPLIES: list[Reply] = [
    Ready(ModelInfo(target="m.py", mode=Mode.TRAIN, parameter_bytes=64,
                    training_step=TrainingStep(False, True, 1e-4))),
    ContractError("m.py: make_inputs(1) raised ValueError: no", "  File m.py, line 3"),
    LoadOom("host OOM: no memory", "cpu", parameter_bytes=2**30, available_memory_bytes=2**20),
    CeilingsMeasured(CEILINGS), Phase(8, "timing"),
    Timed(BatchResult(8, Status.OK, peak_memory_method=PeakMemoryMethod.WORKER_PEAK_RSS)),
    BatchDone(BatchResult(8, Status.OOM, error="out", flags=[
        Flag(FlagKind.BREAKDOWN_FAILED, 8, values={"phase": "profiling", "error": "x"})])),
    GridTimed(GridPoint(4, 128, Status.OK)),
    ProbesTimed({"k": 1e-3}, {"j": "RuntimeError: no"}, ["b"], 0.25), BuffersKept(True)]


@pytest.mark.parametrize("message", REQUESTS + REPLIES, ids=lambda m: type(m).__name__)
def test_every_message_crosses_a_pipe_as_itself(message: Request | Reply) -> None:
    assert pickle.loads(pickle.dumps(message)) == message
    parent, child = Pipe()
    child.send(message)
    assert parent.recv() == message


def test_a_model_that_does_not_load_says_what_it_would_take() -> None:
    message = load_oom_message(LoadOom("CUDA out of memory", "cuda:0", 3 * 2**30, 2**30))
    assert message == ("the model does not fit on cuda:0 (its parameters and buffers take "
                       "3,072 MiB): CUDA out of memory; 1,024 MiB was free.")


def test_the_worker_answers_each_request_with_its_replies() -> None:
    from batchscope.profiler.worker import Worker, answer

    replies: list[Reply] = []
    worker = Worker(WorkerConfig(str(MODELS / "tiny.py"), op_breakdown=False), replies.append)
    try:
        info = worker.info()
        # Linear(16, 32) and Linear(32, 4) in fp32: parameters and buffers, in bytes
        assert info.parameters == 16 * 32 + 32 + 32 * 4 + 4
        assert info.parameter_bytes == 4 * info.parameters and info.mode == Mode.INFERENCE
        assert answer(worker, MeasureBatch(2, first_step=True))
        assert [type(r) for r in replies] == [Phase, Timed, BatchDone]
        done = replies[-1]
        assert isinstance(done, BatchDone) and done.result.status == Status.OK
        assert done.result.batch_size == 2 and done.result.latency_s is not None
        replies.clear()
        spec = ProbeSpec("mm-probe", "mm", [[2, 16], [16, 32]])
        assert answer(worker, RunProbes([spec]))
        (probes,) = replies
        assert isinstance(probes, ProbesTimed) and probes.times_s["mm-probe"] > 0
    finally:
        worker.sampler.close()


def test_a_contract_error_at_the_first_step_is_a_reply_and_ends_the_worker() -> None:
    from batchscope.profiler.worker import Worker, answer

    replies: list[Reply] = []
    worker = Worker(WorkerConfig(str(MODELS / "wrong_batch_dim.py"), op_breakdown=False),
                    replies.append)
    assert not answer(worker, MeasureBatch(3, first_step=True))
    (error,) = replies
    assert isinstance(error, ContractError) and "shape" in error.message
    # later in the run the same failure is the batch size's own model_error
    replies.clear()
    worker = Worker(WorkerConfig(str(MODELS / "wrong_batch_dim.py"), op_breakdown=False),
                    replies.append)
    assert not answer(worker, MeasureBatch(3))
    (done,) = replies
    assert isinstance(done, BatchDone) and done.result.status == Status.MODEL_ERROR


def test_a_failed_load_is_told_as_a_contract_error_or_a_load_oom() -> None:
    from batchscope.profiler.worker import Worker, load_failure

    config = WorkerConfig(str(MODELS / "build_oom.py"))
    with pytest.raises(BaseException) as built:  # what worker_main catches
        Worker(config, lambda reply: None)
    oom = load_failure(built.value, config)
    assert isinstance(oom, LoadOom) and oom.device == "cpu" and "OOM" in oom.message
    missing = WorkerConfig(str(MODELS / "no_make_inputs.py"))
    with pytest.raises(BaseException) as loaded:
        Worker(missing, lambda reply: None)
    error = load_failure(loaded.value, missing)
    assert isinstance(error, ContractError) and "defines no make_inputs()" in error.message
