"""Lightning callbacks that own the suite's measurements. Importing this package registers the
configurable ones (the `callbacks:` section of a config)."""

from callbacks import attention_bias, attention_probe, emergence, influence_probe, plateau  # noqa: F401
