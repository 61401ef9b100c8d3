"""guardless: export PyTorch models to the guardless graph format (see `export`)."""

from .export import Exported, ExportError, export, from_exported

__all__ = ["Exported", "ExportError", "export", "from_exported"]
