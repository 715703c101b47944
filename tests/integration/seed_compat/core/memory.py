"""Rename-only shim: core.memory of the seed-003 framework is vmem.aio."""
from vmem.aio import (AgentResponse, ApprovalRequest,  # noqa: F401
                      DatabaseError, Document, MemoryManager, Message,
                      Session, ToolGapReport, ValidationError)

__all__ = ["MemoryManager", "DatabaseError", "ValidationError", "Session",
           "Message", "Document", "AgentResponse", "ToolGapReport",
           "ApprovalRequest"]
