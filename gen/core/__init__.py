"""gen.core."""
