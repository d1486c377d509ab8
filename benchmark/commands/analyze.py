"""`emergence-bench analyze`: emergence bisection and causal head patching, of runs and of Pythia
(emergence_bench.analysis.analyze, which checks its own extra arguments)."""

from emergence_bench.analysis import analyze
from emergence_bench.commands.command import register_command

register_command("analyze", analyze.add_parser, analyze.main)
