"""gen.store.results_log."""
