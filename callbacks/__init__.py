"""Lightning callbacks that record the suite's measurements, or intervene on training. Importing this
package (or ``callbacks.contract``) loads none of them: ``registry.callbacks`` imports the modules
``BUILTINS`` names when a class is first asked for, and each registers its configurable callbacks;
their names and keys it reads from ``catalog.py`` alone. What they record is declared apart, without
Lightning (``emergence_bench.measurements``), so that reading results never imports a callback."""

BUILTINS = ("emergence", "plateau", "attention_probe", "influence_probe", "attention_bias", "attention_distillation",
            "forecast_stop")
