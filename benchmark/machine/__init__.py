"""Machine policies: how many threads a run uses, how freed memory is kept, which device runs it."""
