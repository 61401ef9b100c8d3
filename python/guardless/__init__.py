"""guardless: export PyTorch models to the guardless graph format (`export`), or compile them
in-process with `torch.compile(model, backend=guardless.backend)`."""

from .dynamo import Fallback, GuardlessError, backend, fallbacks, make_backend, reset, stats
from .export import Exported, ExportError, export, from_exported

__all__ = [
    "Exported", "ExportError", "export", "from_exported",
    "backend", "make_backend", "fallbacks", "stats", "reset", "Fallback", "GuardlessError",
]
