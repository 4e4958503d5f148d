"""The commands that evaluate (sweep, compile, tune, revalidate), and gen.sweep / gen.tune."""
