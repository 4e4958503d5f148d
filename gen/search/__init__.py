"""gen.search."""
