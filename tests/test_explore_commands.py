"""The command language: parsing, scripts, errors, completion, help and rendering."""

from __future__ import annotations

import pytest

from timetravel.explore import compare_results as cr
from timetravel.explore import results as r
from timetravel.explore.commands import (
    COMMAND_NAMES,
    COMMAND_SPECS,
    CommandContext,
    CommandError,
    Moment,
    complete,
    completion_context,
    parse,
    parse_script,
    render_text,
    run_line,
)
from timetravel.explore.minimize import minimize
from timetravel.scenarios import get_scenario

ISSUE_COMMANDS = [
    "goto",
    "step",
    "back",
    "where",
    "events",
    "print",
    "watch",
    "find-first",
    "branch",
    "branches",
    "fanout",
    "likelihood",
    "compare",
    "diff",
    "divergence",
    "rerun",
    "minimize",
    "faults",
    "export",
    "explain",  # issue 15
    "origin",  # issue 15
    "help",
]


def test_the_language_has_exactly_the_commands_of_the_issue() -> None:
    assert sorted(COMMAND_NAMES) == sorted(ISSUE_COMMANDS)


def test_times_are_read_in_the_display_unit_and_event_numbers_with_hash() -> None:
    assert parse("goto 950").value("time") == Moment(t_ns=950_000_000)
    assert parse("goto 950", display_unit="us").value("time") == Moment(t_ns=950_000)
    assert parse("goto 1.5s").value("time") == Moment(t_ns=1_500_000_000)
    assert parse("goto #4096").value("time") == Moment(event=4096)
    assert parse("goto 80ns --branch b1").options == {"branch": "b1"}


def test_branch_options_repeat_and_are_typed() -> None:
    invocation = parse(
        "branch --at 950 --branch-seed 3 --drop-fault f3 --drop-fault f7 --set bug=none --name=fixed "
        '--add-fault \'{"kind": "drop", "target": "w1", "t_start": 5}\''
    )
    assert invocation.options == {
        "at": Moment(t_ns=950_000_000),
        "branch_seed": 3,
        "drop_fault": ["f3", "f7"],
        "set": ["bug=none"],
        "name": "fixed",
        "add_fault": [{"kind": "drop", "target": "w1", "t_start": 5}],
    }


def test_predicates_take_the_rest_of_the_line() -> None:
    assert parse("find-first nodes/*/step >= 40 --go").value("predicate") == "nodes/*/step >= 40"
    assert parse("find-first nodes/*/step >= 40 --go").options == {"go": True}
    assert parse("find-first --go nonfinite(nodes/*/weights)").options == {"go": True}
    assert parse("find-first 'max(nodes/*/loss) > 1e3'").value("predicate") == "max(nodes/*/loss) > 1e3"


@pytest.mark.parametrize(
    "line, message",
    [
        ("brnach", "unknown command 'brnach' \\(did you mean `branch`\\?\\)"),
        ("goto", "goto: missing TIME"),
        ("goto soon", "goto TIME: 'soon': not a time"),
        ("step -1", "must not be negative"),
        ("step 1 2", "unexpected '2'"),
        ("branch --drop", "unknown option --drop \\(did you mean --drop-fault\\?\\)"),
        ("branch --name a --name b", "--name given twice"),
        ("branch --set bug", "expected key=value"),
        ("branch --add-fault {x", "invalid JSON"),
        ("diff main b1 --first-divergence=yes", "takes no value"),
        ("diff main b1 --path 'a b'", "--path: 'a b'"),
        ("find-first nonfinite(", "ends too early"),
        ("minimize --max-seconds -3", "non-negative"),
        ("fanout --samples", "needs a value"),
        ("goto 'unclosed", "cannot split"),
        ("", "empty command"),
        ("goto 1; goto 2", "one command expected"),
    ],
)
def test_bad_lines_are_one_line_errors(line: str, message: str) -> None:
    with pytest.raises(CommandError, match=message) as caught:
        parse(line)
    assert "\n" not in str(caught.value)


def test_scripts_split_on_semicolons_and_lines_and_skip_comments() -> None:
    script = "goto 950; branch --branch-seed 1\n# a comment\ncompare main b1;\n\n  where  "
    assert [(i.name, i.text) for i in parse_script(script)] == [
        ("goto", "goto 950"),
        ("branch", "branch --branch-seed 1"),
        ("compare", "compare main b1"),
        ("where", "where"),
    ]
    assert parse_script("branch --set 'note=a;b'")[0].options == {"set": ["note=a;b"]}


def test_help_lists_every_command_and_details_one() -> None:
    context = CommandContext()
    overview = run_line("help", context)
    assert [entry.name for entry in overview.entries] == list(COMMAND_NAMES)
    detail = run_line("help branch", context)
    assert detail.detail.startswith("branch [--at TIME] [--from BRANCH]")
    assert "--drop-fault FAULT" in detail.detail and "examples:" in detail.detail
    assert run_line("? goto", context).entries[0].name == "goto"
    with pytest.raises(CommandError, match="unknown command"):
        run_line("help nothing", context)


def test_commands_over_a_recording_need_one_open() -> None:
    with pytest.raises(CommandError, match="goto: no recording is open"):
        run_line("goto 950", CommandContext())


def test_every_example_in_the_specs_parses() -> None:
    for spec in COMMAND_SPECS:
        for example in spec.examples:
            assert parse(example).name == spec.name


class Source:
    def values(self, kind: str, prefix: str) -> list[str]:
        return {
            "branch": ["main", "b1", "b2"],
            "fault": ["f1", "f2", "f10"],
            "path": ["nodes", "nodes/w0", "faults"],
        }.get(kind, [])


@pytest.mark.parametrize(
    "text, kind, candidates",
    [
        ("", "command", [*COMMAND_NAMES, "?"]),
        ("bra", "command", ["branch", "branches"]),
        ("goto 9; br", "command", ["branch", "branches"]),
        ("fanout --s", "option", ["--samples"]),
        ("branch --drop-fault f1", "fault", ["f1", "f10"]),
        ("branch --at 950 --drop-fault ", "fault", ["f1", "f2", "f10"]),
        ("compare main b", "branch", ["b1", "b2"]),
        ("diff main b1 --path=no", "path", ["nodes", "nodes/w0"]),
        ("find-first dif", "predicate", ["differ("]),
        ("find-first nonfinite(nodes/", "predicate", ["nodes/w0"]),
        ("help br", "command", ["branch", "branches"]),
    ],
)
def test_completion(text: str, kind: str, candidates: list[str]) -> None:
    context = completion_context(text)
    assert context is not None and context.kind == kind
    assert [c.text for c in complete(text, Source())] == candidates


def test_completion_replaces_only_the_fragment() -> None:
    (completion,) = complete("find-first nonfinite(nodes/", Source())
    assert (completion.text, completion.replace_chars) == ("nodes/w0", len("nodes/"))
    assert complete("where extra", Source()) == []


def test_text_rendering_of_results() -> None:
    fanout = r.FanoutResult(
        at_ns=950_000_000, samples=4, failure_rate=0.75, by_signature={"nan:x": 3, "pass": 1}
    )
    assert render_text(fanout) == [
        "4 futures from 950ms: failure rate 75%",
        "      3  nan:x",
        "      1  pass",
    ]
    divergence = cr.Divergence(
        t_ns=961_000_000, node="rank3", kind="fault", seq_a=10, seq_b=None, reason="only in a"
    )
    compare = cr.CompareResult(cr.RunSide("main", "fail", None), cr.RunSide("b1", "pass", None), divergence)
    assert (
        render_text(compare)[2]
        == "first divergence at 961ms: fault on rank3 (a no such event, b no such event): only in a"
    )
    assert compare.to_data()["first_divergence"] == {
        "t_ns": 961_000_000,
        "node": "rank3",
        "kind": "fault",
        "seq_a": 10,
        "seq_b": None,
        "event_a": None,
        "event_b": None,
    }
    needle = get_scenario("needle")
    result = minimize(needle, needle.resolve_config({}), 0)
    lines = render_text(result)
    assert lines[0].startswith(f"minimized assertion:needle.total in {result.runs} runs")
    assert lines[1] == f"  faults  102 -> 2: {', '.join(result.faults_kept)}"
    with pytest.raises(TypeError):
        render_text(object())
