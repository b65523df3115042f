"""Generated descriptions of flowd's files and protocol: JSON schemas (`flowd schema`) and the
editors' protocol files rendered from the declared protocol (docs/protocol.md)."""
