"""The statistics the suite uses, on numbers and curves, never on result rows (a row's curves are
read with them by ``emergence_bench.results.row_curves``): ``medians`` (the Kaplan–Meier median of
censored times and its interval, the Wilson interval of a proportion), ``significance`` (the exact
tests and the bootstrap), ``quartile_ratio`` (how widely seeds spread in when they emerge: claim 1's
test), ``power`` (a test's power, exact or simulated, and the smallest size that reaches a target),
``emergence_model`` (when runs emerge, fitted to a stage's estimates, to simulate power from),
``transition_share`` (how much of the time to a curve's drop the drop took), ``transition_fit`` (the
abruptness rule's model comparison) and ``held_plateau`` (the plateau a loss curve held)."""
