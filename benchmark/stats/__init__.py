"""The statistics the suite uses, on numbers and curves, never on result rows (a row's curves are
read with them by ``emergence_bench.results.row_curves``): ``medians`` (the Kaplan–Meier median of
censored times and its interval, the Wilson interval of a proportion), ``significance`` (the exact
tests and the bootstrap), ``transition_share`` (how much of the time to a curve's drop the drop
took), ``transition_fit`` (the abruptness rule's model comparison) and ``held_plateau`` (the plateau
a loss curve held)."""
