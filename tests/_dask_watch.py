"""A local dask cluster and fault injection on it, shared by the cluster
tests (``test_distributed.py``: chain tasks; ``test_dask_fit.py``: passes
over blocks): act on the worker that runs a task of a given name."""
import os
import threading
import time


def local_client():
    """A client of two single-threaded worker processes, a cluster in
    miniature on 2 cores (start-up takes a few seconds: the workers are
    spawned interpreters); a generator for a module fixture."""
    import distributed

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def when_a_task_runs(client, key_part, action, timeout=60.0):
    """In a thread: as soon as a task whose key contains ``key_part`` is
    processing on a worker, call ``action(address)`` once; returns the
    thread and its ``hits`` (the addresses acted on)."""
    def watch():
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for address, keys in client.processing().items():
                if any(key_part in str(k) for k in keys):
                    watch.hits.append(address)
                    action(address)
                    return
            time.sleep(0.005)

    watch.hits = []
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, watch.hits


def killer(client):
    """``action(address)`` that ends the worker's process at once (as a
    machine lost or an out-of-memory kill would)."""
    def die():
        os._exit(1)

    def kill(address):
        try:
            client.run(die, workers=[address])
        except Exception:       # the worker died before it answered
            pass
    return kill
