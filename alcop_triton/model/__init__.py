"""Performance models (placeholder while building)."""
