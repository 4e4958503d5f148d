"""gen.build."""
