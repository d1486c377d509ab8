"""Analysis of trained runs: checkpoint bisection, head patching, Pythia, language probes."""
