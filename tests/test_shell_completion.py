"""Shell completion: words of a half-typed line, fuzzy ranking, slots by argument kind, candidates."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from shell_fakes import VOCABULARY, FakeSource

from timetravel.shell.completer import ShellCompleter
from timetravel.shell.completion import EmptySource, complete, find_slot
from timetravel.shell.fuzzy import match, rank
from timetravel.shell.words import line_state, quote_word, split_raw_commands


def texts(line: str) -> list[str]:
    return [item.text for item in complete(line, VOCABULARY, FakeSource())]


# -- words ---------------------------------------------------------------------------------------


def test_line_state_splits_finished_words_from_the_partial_one() -> None:
    state = line_state("goto 95")
    assert (state.words, state.partial, state.partial_raw_length) == (("goto",), "95", 2)
    state = line_state("goto 950 ")
    assert (state.words, state.partial, state.partial_raw_length) == (("goto", "950"), "", 0)


def test_line_state_tolerates_an_open_quote_and_counts_its_raw_length() -> None:
    state = line_state('branch --add-fault \'{"kind": "dr')
    assert state.words == ("branch", "--add-fault")
    assert state.partial == '{"kind": "dr'
    assert state.partial_raw_length == len('\'{"kind": "dr')


def test_line_state_starts_a_new_command_after_a_separator() -> None:
    assert line_state("goto 950; compare ma").words == ("compare",)
    assert line_state("goto 950;").words == ()
    assert line_state("print 'a;b' x").words == ("print", "a;b")


def test_quote_word_quotes_only_when_the_word_would_split() -> None:
    assert quote_word("nodes/*/weights") == "nodes/*/weights"
    assert quote_word("nonfinite(nodes/rank3") == "nonfinite(nodes/rank3"
    assert quote_word("my file.ttr") == "'my file.ttr'"
    assert quote_word("a;b") == "'a;b'"


def test_split_raw_commands_keeps_the_typed_text_and_reports_open_quotes() -> None:
    assert split_raw_commands("goto 950;  branch --branch-seed 1 ;compare main b1") == (
        ["goto 950", "branch --branch-seed 1", "compare main b1"],
        False,
    )
    assert split_raw_commands("find-first 'a;b'; step") == (["find-first 'a;b'", "step"], False)
    assert split_raw_commands("print 'open") == (["print 'open"], True)
    assert split_raw_commands(" ; ;") == ([], False)


# -- fuzzy ---------------------------------------------------------------------------------------


def test_fuzzy_match_finds_the_tightest_placement_of_the_typed_characters() -> None:
    assert match("fd", "find-first") == (0, 3)
    assert match("ff", "find-first") == (0, 5)
    assert match("df", "--drop-fault") == (2, 7)
    assert match("xyz", "goto") is None
    assert match("", "goto") == ()
    assert match("GT", "goto") == (0, 2)


def test_fuzzy_rank_puts_prefixes_first_then_earliest_then_tightest() -> None:
    found = [m.text for m in rank("r3", ["rank13", "rank3", "worker3", "r3x"])]
    assert found == ["r3x", "rank3", "rank13", "worker3"]
    assert [m.text for m in rank("re", ["results/", "repro.ttr", "xyz"])] == ["results/", "repro.ttr"]
    assert [m.text for m in rank("", ["b", "a", "c"])] == ["b", "a", "c"]
    assert [m.text for m in rank("ra", [f"rank{i}" for i in range(10)], limit=3)] == [
        "rank0",
        "rank1",
        "rank2",
    ]


# -- slots and candidates ------------------------------------------------------------------------


def test_plot_takes_any_number_of_branches() -> None:
    assert texts("plot main ") == ["main", "b1", "fixed", "--metric", "--log", "--width", "--height"]
    assert texts("plot main --log f") == ["fixed"]


def test_the_slot_follows_the_argument_and_option_kinds_of_the_spec() -> None:
    assert find_slot((), "go", VOCABULARY).kind == "command"
    assert find_slot(("goto",), "", VOCABULARY).kind == "time"
    assert find_slot(("goto", "950"), "", VOCABULARY).kind == "option"
    assert find_slot(("goto", "950", "--branch"), "", VOCABULARY).kind == "branch"
    assert find_slot(("compare", "main"), "", VOCABULARY).kind == "branch"
    assert find_slot(("events", "--node"), "", VOCABULARY).kind == "node"
    assert find_slot(("events", "--after"), "", VOCABULARY).kind == "option"
    assert find_slot(("branch",), "--drop-fault=", VOCABULARY).kind == "fault"
    assert find_slot(("?",), "", VOCABULARY).kind == "command"
    assert find_slot(("nosuch",), "", VOCABULARY).kind == "none"
    optional = find_slot(("print",), "", VOCABULARY)
    assert (optional.kind, optional.options_too) == ("path", True)


def test_a_rest_argument_keeps_every_later_word_even_one_like_an_option() -> None:
    """As in the parser: once a predicate started, ``--from`` is part of it (options go first)."""
    slot = find_slot(("find-first", "max(nodes/*/loss)", ">"), "--", VOCABULARY)
    assert slot.kind == "predicate"
    assert find_slot(("find-first", "--from"), "", VOCABULARY).kind == "time"


def test_commands_complete_fuzzily_with_their_summary() -> None:
    found = complete("fif", VOCABULARY, EmptySource())
    assert [(item.text, item.meta) for item in found] == [
        ("find-first", "the first moment a predicate holds, and the nodes it holds for")
    ]
    assert texts("ff") == ["find-first", "diff"]
    assert texts("cmp") == ["compare"]
    assert texts("goto 950; brs") == ["branches"]
    assert texts("qu") == ["quit"]
    assert texts("plot --l") == ["--log"]


def test_options_complete_with_their_kind_and_help() -> None:
    found = complete("branch --drf", VOCABULARY, EmptySource())
    assert [(item.text, item.replace_length, item.meta) for item in found] == [
        ("--drop-fault", 5, "FAULT: remove a fault from the schedule")
    ]
    assert texts("events --") == ["--node", "--kind", "--count", "--after"]


def test_times_come_from_the_recording_in_order() -> None:
    assert texts("goto ") == ["0ms", "500ms", "950ms", "1000ms"]
    assert texts("goto 95") == ["950ms"]
    assert texts("branch --at=9") == ["--at=950ms"]
    assert texts("find-first --from 5") == ["500ms", "950ms"]


def test_node_branch_fault_and_setting_names_come_from_the_source() -> None:
    assert texts("events --node rank1")[:5] == ["rank1", "rank10", "rank11", "rank12", "rank13"]
    assert texts("compare main f") == ["fixed"]
    assert texts("goto 1 --branch ") == ["main", "b1", "fixed"]
    assert texts("branch --drop-fault f3") == ["f3"]
    assert texts("branch --set bug") == ["bug=none", "bug=flip"]
    assert texts("branch --set=bug=fl") == ["--set=bug=flip"]


def test_state_paths_complete_one_segment_at_a_time_through_wildcards() -> None:
    assert texts("print no") == ["nodes"]
    assert texts("print nodes/r13") == ["nodes/rank13"]
    assert texts("print nodes/*/") == ["nodes/*/step", "nodes/*/weights", "nodes/*/loss"]
    assert texts("print nodes/rank3/w") == ["nodes/rank3/weights"]
    assert texts("print faults/") == ["faults/0"]
    found = complete("print nodes/r13", VOCABULARY, FakeSource())[0]
    assert found.replace_length == len("nodes/r13")
    assert [found.display[i] for i in found.positions] == ["r", "1", "3"]


def test_a_predicate_completes_function_names_then_paths_inside_them() -> None:
    assert texts("find-first non") == ["nonfinite("]
    assert texts("find-first nonfinite(nodes/rank3/w") == ["nonfinite(nodes/rank3/weights"]
    assert texts("find-first max(nodes/*/lo") == ["max(nodes/*/loss"]
    assert texts("find-first exists(x) and no") == ["nonfinite(", "norm(", "nodes"]


def test_help_completes_command_names_and_unknown_commands_complete_nothing() -> None:
    assert texts("help br") == ["branch", "branches"]
    assert texts("help plo") == ["plot"]  # ("pl" also fuzzily matches explain)
    assert texts("nosuch ") == []
    # after its two branches, compare offers only its options (--reference and its companions)
    assert texts("compare main b1 ") == ["--reference", "--rtol", "--reference-metric", "--reference-node"]


def test_file_names_complete_from_the_file_system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "repro.ttr").write_bytes(b"")
    (tmp_path / "results").mkdir()
    (tmp_path / ".hidden").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert texts("minimize --out re") == ["repro.ttr", "results/"]
    assert texts("minimize --out results/") == []
    assert texts(f"minimize --out {tmp_path}/rt") == [f"{tmp_path}/results/", f"{tmp_path}/repro.ttr"]


def test_a_name_with_a_space_is_inserted_quoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my repro.ttr").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert texts("minimize --out my") == ["'my repro.ttr'"]


# -- the prompt_toolkit completer ----------------------------------------------------------------


def prompt_toolkit_completions(text: str) -> list[tuple[str, int, str]]:
    completer = ShellCompleter(VOCABULARY, FakeSource)
    event = CompleteEvent(completion_requested=True)
    return [
        (item.text, item.start_position, item.display_meta_text)
        for item in completer.get_completions(Document(text, len(text)), event)
    ]


def test_the_completer_replaces_the_partial_word_and_shows_meta() -> None:
    assert prompt_toolkit_completions("goto 95") == [("950ms", -2, "snapshot")]
    assert prompt_toolkit_completions("compare main b") == [("b1", -1, "pass")]
    assert prompt_toolkit_completions("print nodes/rank3/we") == [("nodes/rank3/weights", -14, "")]


def test_the_completer_completes_at_the_cursor_not_at_the_end_of_the_line() -> None:
    completer = ShellCompleter(VOCABULARY, FakeSource)
    text = "compare ma b1"
    found = list(completer.get_completions(Document(text, len("compare ma")), CompleteEvent()))
    assert [(item.text, item.start_position) for item in found] == [("main", -2)]


def test_the_completer_highlights_the_matched_characters() -> None:
    completer = ShellCompleter(VOCABULARY, FakeSource)
    (item,) = completer.get_completions(Document("fif"), CompleteEvent(completion_requested=True))
    styles = [style for style, _ in item.display]
    highlighted = "".join(text for style, text in item.display if "inside" in style)
    assert highlighted == "fif" and len(styles) == len("find-first")


class BoundedSource:
    """1,000 ranks, and at most 200 values per question, as RecordingValues answers (VALUES_MAX)."""

    names: ClassVar[list[str]] = [f"rank{index}" for index in range(1_000)]

    def values(self, kind: str, prefix: str) -> list[str]:
        if kind == "node":
            return [name for name in self.names if name.startswith(prefix)][:200]
        if kind == "path":
            directory = prefix.rpartition("/")[0]
            if directory == "nodes":
                return [f"nodes/{name}" for name in self.names if f"nodes/{name}".startswith(prefix)][:200]
        return []


def test_a_bounded_source_still_completes_values_past_its_bound() -> None:
    found = [item.text for item in complete("events --node rank70", VOCABULARY, BoundedSource())]
    assert found[:3] == ["rank70", "rank700", "rank701"] and "rank709" in found
    paths = [item.text for item in complete("print nodes/rank70", VOCABULARY, BoundedSource())]
    assert paths[:2] == ["nodes/rank70", "nodes/rank700"] and "nodes/rank709" in paths
