"""Policies by name, so drivers and benchmarks pick one from configuration."""

from __future__ import annotations

from collections.abc import Callable

from firepool.scheduling.errors import UnknownPolicyError
from firepool.scheduling.policies.drf import DrfPolicy
from firepool.scheduling.policies.gavel import GavelPolicy
from firepool.scheduling.policies.hybrid import OakNsga2Policy
from firepool.scheduling.policies.lookahead import LookaheadPolicy
from firepool.scheduling.policies.oak import OakPolicy
from firepool.scheduling.policies.pollux import PolluxPolicy
from firepool.scheduling.policies.sia import SIA_REFERENCE, SiaPolicy
from firepool.scheduling.rounds import RoundPolicy

_FACTORIES: dict[str, Callable[[], RoundPolicy]] = {
    "oak": OakPolicy,
    "sia": SiaPolicy,
    "sia-reference": lambda: SiaPolicy(SIA_REFERENCE, name="sia-reference"),
    "pollux": PolluxPolicy,
    "gavel": GavelPolicy,
    "drf": DrfPolicy,
    "oak-nsga2": OakNsga2Policy,
    "lookahead": LookaheadPolicy,
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def make_policy(name: str) -> RoundPolicy:
    """A policy with its paper defaults; construct the classes directly to change knobs."""
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise UnknownPolicyError(
            f"unknown round policy {name!r}; choose from {POLICY_NAMES}", field="policy"
        ) from None
