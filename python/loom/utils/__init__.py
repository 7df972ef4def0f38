"""loom.utils: torch.utils' names (data: datasets, samplers, DataLoader)."""
from . import data  # noqa: F401
