"""A scripted model behind real HTTP: the only stand-in of the real-agent suite (docs/roster.md)."""

from tests.model_stub.server import Delay, Fault, LogEntry, ModelStub

__all__ = ["Delay", "Fault", "LogEntry", "ModelStub"]
