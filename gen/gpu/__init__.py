"""gen.gpu."""
