"""gen.evaluate."""
