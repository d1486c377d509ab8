"""Lightning callbacks that own the suite's measurements. Importing this package (or
``callbacks.contract``) loads none of them: ``registry.callbacks`` imports the modules ``BUILTINS``
names when it is first read, and each registers its configurable callbacks and the measurements they
declare (``emergence_bench.results.measurement``), whose leaderboard columns come in this order."""

BUILTINS = ("emergence", "plateau", "attention_probe", "influence_probe", "abruptness", "recorder",
            "attention_bias", "attention_distillation", "forecast_stop")
