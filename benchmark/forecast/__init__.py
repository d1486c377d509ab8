"""Forecasting each run's emergence step from its early records (``emergence-bench forecast``).

By concern: ``features`` (what a row says up to a window's end), ``survival`` (the censored
log-normal model and Harrell's C), ``evaluate`` (leave-one-out, transfer, permutation p),
``command`` (the CLI). ``callbacks/forecast_stop.py`` uses a saved model during a sweep.
"""

PERMUTATIONS = 200  # shuffles for a permutation p: its smallest value is 1/201 < 0.01
