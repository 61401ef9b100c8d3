"""guardless: export PyTorch models to the guardless graph format (`export`), or compile them
in-process with `torch.compile(model, backend=guardless.backend)`; the `guardless` command
(`guardless.cli`).

The names below are imported on first use, so that the command starts without importing torch."""

import importlib

_MODULE_OF = {
    "Exported": "exporter", "ExportError": "exporter", "export": "exporter", "from_exported": "exporter",
    "backend": "dynamo", "make_backend": "dynamo", "fallbacks": "dynamo", "stats": "dynamo",
    "reset": "dynamo", "Fallback": "dynamo", "GuardlessError": "dynamo",
    "paged_attention": "ops", "write_kv_cache": "ops",
}

__all__ = list(_MODULE_OF)


def __getattr__(name: str):
    if name == "hf":  # transformers' continuous batching (guardless.hf), imported on first use
        return importlib.import_module(".hf", __name__)
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'guardless' has no attribute '{name}'")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
