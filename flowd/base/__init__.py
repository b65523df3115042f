"""The base layer: errors, durable file writes, times, wire models, path arithmetic."""
