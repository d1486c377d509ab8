"""Synthetic tasks: one LightningDataModule per module. Importing this package (or ``tasks.base``)
loads none of them: ``registry.tasks`` imports the modules ``BUILTINS`` names when it is first read,
and each registers its task."""

BUILTINS = ("cellular_automata", "linear_map", "dyck", "in_context_linear_map", "mqar", "neural_ca", "induction")
