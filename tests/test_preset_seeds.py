"""A preset may name its own default seed (``Scenario.preset_seeds``): the seed a demo was made for."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from timetravel.cli.common import add_scenario_arguments, chosen_seed
from timetravel.scenarios import get_scenario
from timetravel.sim import Param

PINGPONG = get_scenario("pingpong")
WITH_DEMO = dataclasses.replace(
    PINGPONG,
    params=(*PINGPONG.params, Param("preset", "str", "none", "a named bundle of settings")),
    presets={"demo": {"rounds": 3}},
    preset_seeds={"demo": 41},
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_scenario_arguments(parser)
    return parser.parse_args(["pingpong", *argv])


def test_the_presets_seed_applies_only_when_no_seed_is_given() -> None:
    demo = WITH_DEMO.resolve_config(["preset=demo"])
    assert chosen_seed(parse("--set", "preset=demo"), WITH_DEMO, demo) == 41
    assert chosen_seed(parse("--seed", "0"), WITH_DEMO, demo) == 0  # an explicit 0 wins too
    assert chosen_seed(parse("--seed", "7"), WITH_DEMO, demo) == 7
    assert chosen_seed(parse(), WITH_DEMO, WITH_DEMO.resolve_config([])) == 0
    assert parse().seed == 0  # commands that read args.seed directly keep their default


def test_preset_seeds_must_name_a_preset() -> None:
    with pytest.raises(ValueError, match="unknown preset 'dem'"):
        dataclasses.replace(PINGPONG, presets={"demo": {}}, preset_seeds={"dem": 1})
