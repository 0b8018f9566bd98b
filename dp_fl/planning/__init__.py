"""Planning a private run before launching it (scripts/plan's library)."""
