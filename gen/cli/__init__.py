"""gen.cli.main."""
