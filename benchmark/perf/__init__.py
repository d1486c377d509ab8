"""Performance harness: `emergence-bench speed`, timing the suite's own training step against references."""
