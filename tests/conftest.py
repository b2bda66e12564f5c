"""Fixtures shared by the test modules."""

import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module's tests, restored after: the
    problems are small (threads only add synchronisation cost), and on an
    oversubscribed machine OpenMP waits dominate. Torch is imported here,
    when a module that uses the fixture runs, never at collection."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler (``KeyboardInterrupt``) for a test that
    sends itself a real Ctrl-C, restored after: a shell's background job
    starts with SIGINT ignored, and Python then leaves it ignored, so the
    signal would do nothing and the test would fail for the shell's sake."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
