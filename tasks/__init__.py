"""Synthetic tasks: one LightningDataModule per module. Importing this package registers the built-ins."""

from tasks import linear_map  # noqa: F401
