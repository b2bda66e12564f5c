"""The torch backend of the network estimator, imported on demand."""
import importlib

_TORCH_HINT = (
    "SGMCMCMLPClassifier needs PyTorch; install it with "
    "'pip install \"skbayes_sg[torch]\"'."
)


def _import_torch_backend():
    """Import torch and the private torch kernels, with a helpful error."""
    try:
        importlib.import_module("torch")
    except ImportError as exc:  # pragma: no cover - exercised without torch
        raise ImportError(_TORCH_HINT) from exc
    return importlib.import_module("._torch_sampler", __package__)
