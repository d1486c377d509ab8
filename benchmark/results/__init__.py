"""The results: what a run's row holds, and where rows are kept. ``row``: the row's shape and the one
reader of its sections; ``measurement``: a measured quantity declared once (its section, fields and
leaderboard columns); ``columns``: the column kinds (how a group's runs aggregate); ``store``: the
result files (written atomically, read back as records or a DataFrame, old schemas upgraded on read);
``row_curves``: a row's recorded curves read by the statistics (``emergence_bench.stats``).

Nothing is imported here, so ``row`` and ``measurement`` load without the store's pandas."""
