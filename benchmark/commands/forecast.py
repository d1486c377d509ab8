"""`emergence-bench forecast DIR`: each run's emergence step forecast from its early records
(emergence_bench.forecast.command, which checks its own extra arguments)."""

from emergence_bench.commands.command import register_command
from emergence_bench.forecast import command

register_command("forecast", command.add_parser, command.main)
