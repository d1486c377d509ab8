"""Lightning callbacks that own the suite's measurements. Importing this package registers the
configurable ones (the `callbacks:` section of a config)."""

from emergence_bench.callbacks import (  # noqa: F401
    attention_bias,
    attention_distillation,
    attention_probe,
    emergence,
    forecast_stop,
    influence_probe,
    plateau,
)
