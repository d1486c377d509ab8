"""Token mixers: one module per mixer. Importing this package registers the built-ins."""

from mixers import attention  # noqa: F401
from mixers import mlp_mixer  # noqa: F401
