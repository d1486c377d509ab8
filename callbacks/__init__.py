"""Lightning callbacks that own the suite's measurements. Importing this package registers the
configurable ones (the `callbacks:` section of a config) and the measurements they declare
(``emergence_bench.measurement``), whose leaderboard columns come in this import order."""

from emergence_bench.callbacks import emergence, plateau, attention_probe, influence_probe, recorder  # noqa: F401
from emergence_bench.callbacks import attention_bias, attention_distillation, forecast_stop  # noqa: F401
