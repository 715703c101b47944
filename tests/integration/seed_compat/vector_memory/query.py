"""Rename-only shim (see __init__)."""
from vmem import PartialOrder  # noqa: F401
