"""Measurement workers on many hosts: the workers of a Dask distributed scheduler (``--scheduler ADDRESS``).

A cluster admin runs the engine: ``dask scheduler`` on one host, ``dask cuda worker ADDRESS`` on every GPU
host (dask-cuda starts one worker process per GPU and pins it with ``CUDA_VISIBLE_DEVICES``), with
``DASK_DISTRIBUTED__WORKER__DAEMON=False`` so that a worker may start its own measurement and compile
processes (``workers.measure_job`` refuses to run in a daemonic worker and says so). Every host needs
alcop_triton installed (the functions are sent by reference). ``docs/distributed_tuning.md`` has the
command lines.

``DaskPool`` has ``LocalGpuPool``'s interface (``workers.WorkerPool``): each worker is named by its
address, and every call is pinned to the worker it names (``workers=[address]``,
``allow_other_workers=False``), so the pool's calibration decides which workers' timings are ranked
together, not Dask's placement.

Dask is an extra (``pip install 'alcop_triton[distributed]'``): it is imported when a pool is made, with
a message saying what to install if it is missing.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable

from ..errors import TuningError

INSTALL_HINT = ("--scheduler needs Dask distributed: pip install 'alcop_triton[distributed]' "
                "(dask and distributed; dask-cuda on the GPU hosts)")


def import_distributed() -> Any:
    """The ``distributed`` module, or a TuningError saying what to install."""
    try:
        import distributed
    except ImportError as exc:
        raise TuningError(f"{INSTALL_HINT} ({exc})") from None
    return distributed


class DaskPool:
    """The workers of a Dask scheduler as a ``workers.WorkerPool``.

    Args:
        scheduler: the scheduler's address ("tcp://host:8786"), or a ``distributed.Client`` (kept open).
        device: what the workers measure on: "cuda" (their pinned GPU) or "cpu" (the Triton interpreter).
        min_workers: wait until this many workers have joined (``timeout_s`` at most).
        timeout_s: how long to wait for the scheduler and the workers.
    """

    def __init__(self, scheduler: Any, *, device: str = "cuda", min_workers: int = 1, timeout_s: float = 60.0) -> None:
        distributed = import_distributed()
        if device not in ("cuda", "cpu"):
            raise TuningError(f"DaskPool device={device!r}: expected 'cuda' or 'cpu'")
        if min_workers < 1:
            raise TuningError(f"DaskPool min_workers={min_workers!r}: expected >= 1")
        self.device = device
        self._own = isinstance(scheduler, str)
        if self._own:
            try:
                self._client = distributed.Client(scheduler, timeout=timeout_s)
            except (OSError, TimeoutError) as exc:
                raise TuningError(f"--scheduler {scheduler!r}: cannot reach the Dask scheduler: {exc}") from None
        else:
            self._client = scheduler
        try:
            self._client.wait_for_workers(min_workers, timeout=timeout_s)
        except TimeoutError:
            have = len(self._client.scheduler_info().get("workers", {}))
            self.close()
            raise TuningError(f"--scheduler: {have} Dask worker(s) joined within {timeout_s:g} s, "
                              f"{min_workers} needed") from None
        self.labels: list[str] = sorted(self._client.scheduler_info()["workers"])
        self._lock = threading.Lock()
        self._live: set[Any] = set()  # Dask forgets a task whose future is dropped: kept until it ends

    def __enter__(self) -> "DaskPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, fn: Callable[..., Any], *args: Any, worker: str) -> "concurrent.futures.Future[Any]":
        if worker not in self.labels:
            raise TuningError(f"worker {worker!r} is not one of this pool's {self.labels}")
        out: concurrent.futures.Future[Any] = concurrent.futures.Future()
        task = self._client.submit(fn, *args, workers=[worker], allow_other_workers=False, pure=False)
        with self._lock:
            self._live.add(task)

        def done(f: Any) -> None:
            try:
                out.set_result(f.result())
            except BaseException as exc:  # noqa: BLE001 - the caller's future carries it
                out.set_exception(exc)
            finally:
                with self._lock:
                    self._live.discard(f)
        task.add_done_callback(done)
        return out

    def close(self) -> None:
        """Stop every worker's measurement processes, and close the client this pool opened."""
        from .workers import close_worker

        if getattr(self, "labels", None):
            try:
                self._client.run(close_worker, workers=self.labels)
            except Exception:  # noqa: BLE001 - a worker gone already has nothing to close
                pass
        if self._own:
            self._client.close()


__all__ = ["DaskPool", "INSTALL_HINT", "import_distributed"]
