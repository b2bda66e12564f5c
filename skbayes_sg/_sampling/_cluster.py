"""Chain rounds on a dask cluster (joblib's ``dask`` backend active).

Under ``joblib.parallel_config(backend="dask")`` the chains run as dask tasks,
but not through ``joblib.Parallel``: joblib's dask backend (1.6) passes a
task's own exception back, yet not a failure of the cluster itself.  A task
whose workers died ``distributed.scheduler.allowed-failures`` times (it ends
``KilledWorker``), or whose input was lost, never reaches ``Parallel``, which
then waits for it forever.  So the pool submits its chain tasks itself, on
the backend's client, and gathers them: a worker lost mid-round is dask's to
retry (a chain task is a pure function of the chain's saved state, its random
stream included, so the retried task returns the very draws the lost one
would have), and a task dask gives up on raises
:class:`~skbayes_sg.exceptions.ClusterError` naming
the chain, the phase and what to change.  Ctrl-C (any error) on the client
cancels the round's tasks on the cluster before it propagates, and a chain
whose task was cancelled stops at its next segment (~0.1 s: dask cannot
stop a running task; the chain asks :func:`task_cancelled`).

``X`` and ``y`` are scattered to every worker once per fit (a restarted
worker fetches them from another), unless ``parallel_config(scatter=[X, y])``
already did: the backend's futures are reused, matched by identity as joblib
does.
"""
import uuid

from ..exceptions import ClusterError

__all__ = ["ClusterRounds", "active_dask_backend", "task_cancelled"]


def task_cancelled():
    """Inside a task on a dask worker: whether the task was cancelled there
    (the client's Ctrl-C; the round abandoned).  False anywhere else, and
    where this version of distributed does not say."""
    try:
        from distributed import get_worker

        worker = get_worker()
        task = worker.state.tasks.get(worker.get_current_task())
        return task is not None and task.state == "cancelled"
    except Exception:
        return False


def active_dask_backend():
    """joblib's active backend if it is the dask one (it has a client), else None."""
    from joblib.parallel import get_active_backend

    backend, _ = get_active_backend()
    if getattr(backend, "client", None) is None or not isinstance(
            getattr(backend, "data_futures", None), dict):
        return None
    return backend


class ClusterRounds:
    """Run one fit's chain rounds as dask tasks (see the module docstring).

    Parameters
    ----------
    backend : joblib's ``DaskDistributedBackend``
        Its client runs the tasks; its ``submit_kwargs`` (``workers=``,
        ``resources=``, ... given to ``parallel_config``) go with each task;
        its ``data_futures`` may hold ``X`` and ``y`` already.
    X, y : the fit's data.
    """

    def __init__(self, backend, X, y):
        self.client = backend.client
        self.submit_kwargs = dict(getattr(backend, "submit_kwargs", {}) or {})
        self._wait_for_workers(getattr(backend, "wait_for_workers_timeout", 10))
        given = backend.data_futures
        self._owned = []
        self.X, self.y = (given[id(a)] if id(a) in given else self._scatter(a) for a in (X, y))

    def _wait_for_workers(self, timeout):
        if self.client.scheduler_info().get("workers"):
            return
        try:
            self.client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise ClusterError(
                f"The dask cluster has no worker after {timeout} s: start workers "
                "(or a LocalCluster), or raise parallel_config(backend='dask', "
                "wait_for_workers_timeout=...).") from None

    def _scatter(self, data):
        future = self.client.scatter(data, broadcast=True, hash=False)
        self._owned.append(future)
        return future

    def run(self, task, states, phase, **kwargs):
        """Advance each chain of ``states`` as one task ``task(X, y,
        state=, chain_id=, phase=, **kwargs)`` (:func:`~._runner.run_chain`);
        return their results in chain order."""
        from distributed import KilledWorker
        from distributed.client import FutureCancelledError

        # keys a dashboard user can read: the phase and the chain, made unique
        tag = f"{task.__name__}-{phase.split(' (')[0]}-{uuid.uuid4().hex[:12]}"
        futures = [self.client.submit(task, self.X, self.y, state=state, chain_id=c,
                                      phase=phase, key=f"{tag}-chain{c}",
                                      **kwargs, **self.submit_kwargs)
                   for c, state in enumerate(states)]
        try:
            return self.client.gather(futures)
        except (FutureCancelledError, KilledWorker) as exc:
            failed = [c for c, f in enumerate(futures) if f.status in ("error", "cancelled")]
            self._cancel(futures)
            what = ("ran on workers that died" if isinstance(exc, KilledWorker)
                    else "was cancelled or lost its data on the cluster")
            raise ClusterError(
                f"The dask task of chain(s) {failed} ({phase}) {what} ({exc}); the fit "
                "was abandoned. A worker that dies repeatedly is usually out of memory "
                "(each holds a copy of X): give the workers more memory or fewer threads "
                "(dask retries a task whose worker died on another one, up to the "
                "scheduler's distributed.scheduler.allowed-failures times, 3 by default), "
                "then fit again.") from exc
        except BaseException:
            # KeyboardInterrupt, or a chain's own error: nothing of this
            # round keeps running on the cluster after fit has returned
            self._cancel(futures)
            raise

    def _cancel(self, futures):
        try:
            self.client.cancel(futures, force=True)
        except Exception:       # the client lost its scheduler: nothing to stop
            pass

    def close(self):
        """Release the data this fit scattered."""
        owned, self._owned = self._owned, []
        if owned:
            self._cancel(owned)
