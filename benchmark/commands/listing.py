"""`emergence-bench list`: every config section, mixer, task, callback and preset, with its keys,
their types and defaults."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from emergence_bench.commands.command import Subparsers, register_command
from emergence_bench.registry import PluginRegistry


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    return subparsers.add_parser("list", help="every mixer, task, callback and preset with its parameters")


def main(args: argparse.Namespace, extra: list[str]) -> int:
    from emergence_bench import registry
    from emergence_bench.execution.sweep_spec import load_sweep, presets

    lines = _sections()
    kinds: list[tuple[str, PluginRegistry[Any]]] = [("mixers", registry.mixers), ("tasks", registry.tasks),
                                                    ("callbacks", registry.callbacks)]
    for title, reg in kinds:
        lines.append(f"{title}:")
        lines.extend(_describe(reg))
    lines.append("presets:")
    for name in presets():
        sweep = load_sweep(name)
        lines.append(f"  {name}  ({sweep.count()} runs) {sweep.description}".rstrip())
    print("\n".join(lines))
    return 0


def _type_name(annotation: Any) -> str:
    """A type as the listing shows it: a fixed choice as its values (``constant | cosine | linear``)."""
    if get_origin(annotation) is Literal:
        return " | ".join(str(choice) for choice in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        return " | ".join(_type_name(part) for part in get_args(annotation))
    return str(annotation) if get_origin(annotation) is not None else getattr(annotation, "__name__", str(annotation))


def _key(name: str, annotation: Any, default: Any) -> str:
    """``name: type = default``: the type as annotated, else the default's type."""
    if isinstance(annotation, str) and annotation:
        kind = annotation
    elif annotation not in (None, inspect.Parameter.empty):
        kind = _type_name(annotation)
    else:
        kind = type(default).__name__ if default not in (None, inspect.Parameter.empty) else "any"
    shown = "<required>" if default is inspect.Parameter.empty else default
    return f"{name}: {kind} = {shown}"


def _wrapped(keys: list[str], indent: str = "      ", width: int = 110) -> list[str]:
    """``keys`` on lines of at most ``width`` characters, never breaking one key."""
    lines: list[str] = []
    for key in keys:
        if lines and len(lines[-1]) + 3 + len(key) <= width:
            lines[-1] += "   " + key
        else:
            lines.append(indent + key)
    return lines or [indent + "(no parameters)"]


def _sections() -> list[str]:
    """Every config section with its keys, type and default (the named sections list below)."""
    from emergence_bench.config import DEFAULT_CALLBACKS, DEFAULT_MIXER, DEFAULT_TASK, SECTIONS, RunConfig

    lines = ["config sections (`run --print-config` shows one resolved; flags: --section.key VALUE):",
             f"  seed: int = {RunConfig().seed}",
             f"  task: name = {DEFAULT_TASK}, then the task's parameters (tasks below)",
             f"  mixer: name = {DEFAULT_MIXER}, then the mixer's parameters (mixers below)"]
    for name, cls in SECTIONS.items():
        defaults, hints = cls(), get_type_hints(cls)
        lines.append(f"  {name}:")
        lines.extend(_wrapped([_key(f.name, hints[f.name], getattr(defaults, f.name))
                               for f in dataclasses.fields(cls)]))
    lines.append("  curriculum: list = [] (stages of {task, steps, vocab, reset_optimizer} trained first)")
    lines.append(f"  callbacks: each callback's name and parameters (callbacks below); on by default: "
                 f"{', '.join(DEFAULT_CALLBACKS)}")
    return lines


def _describe(reg: PluginRegistry[Any]) -> list[str]:
    """Each entry of ``reg`` with its facts and its config keys, then each plugin that failed to import.
    The built-ins are read from their catalog: only a plugin (or an entry registered in this process)
    has its module imported, and then every entry's is."""
    if set(reg.known()) - set(reg.catalog):
        reg.names()  # loads them, a broken plugin warned of once
    lines = []
    for name in (name for name in reg.known() if name not in reg.broken):
        facts = [reg.where(name)]
        if reg.kind == "mixer":
            facts.append("attention scores" if reg.fact(name, "exposes_attention") else "no attention scores")
            facts.append("backends: " + ", ".join(reg.fact(name, "backends")))
        lines.append(f"  {name}  ({'; '.join(facts)})")
        keys = [_key(p.name, p.annotation, p.default) for p in reg.signature(name).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if reg.takes_kwargs(name):
            keys.append("**kwargs (passed through unchecked)")
        lines.extend(_wrapped(keys))
    for name, error in reg.broken.items():
        lines.append(f"  {name}  (plugin failed to import: {error})")
    return lines


register_command("list", add_parser, main, takes_extra=False)
