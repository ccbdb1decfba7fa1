"""What each command accepts: its arguments and options, their kinds, and its help.

The specs are data, so the parser, ``help``, the shell's completer and the TUI's command palette
all read the same table. An argument's or option's **kind** says what a front end should complete
there and how the parser checks the text:

========== ======================================================= ==========================
kind       accepts                                                 completed from
========== ======================================================= ==========================
time       ``950`` (display unit), ``950ms``, ``1.5s``, ``#1234``  snapshot and failure times
count      a non-negative integer                                  —
int        an integer                                              —
seconds    a number of wall-clock seconds                          —
node       a node name                                             the world's nodes
path       a state path such as ``nodes/*/weights``                the world's tree
predicate  a predicate (rest of the line)                          functions, then paths
branch     a branch name                                           the branch tree
fault      a fault id (``f3``)                                     the branch's fault schedule
setting    ``key=value``                                           the scenario's config keys
json       a JSON value                                            —
fault-spec a new fault: ``kind=drop,target=r3,t_start=950ms,...``  —
fault-edit a fault change: ``f3:t_end=990ms,probability=0.5``      the branch's fault ids
file       a file name                                             the file system
command    a command name                                          the commands
name       a new name                                              —
word       any one word                                            —
========== ======================================================= ==========================
"""

from __future__ import annotations

from dataclasses import dataclass, field

ARGUMENT_KINDS = (
    "time",
    "count",
    "int",
    "seconds",
    "node",
    "path",
    "predicate",
    "branch",
    "fault",
    "setting",
    "json",
    "fault-spec",
    "fault-edit",
    "file",
    "command",
    "name",
    "word",
)


@dataclass(frozen=True)
class ArgumentSpec:
    """A positional argument. ``rest`` takes every remaining word: joined by spaces into one value,
    or with ``each`` a list of one value a word (``plot main b1``)."""

    name: str
    kind: str
    help: str
    required: bool = True
    rest: bool = False
    each: bool = False

    def __post_init__(self) -> None:
        assert self.kind in ARGUMENT_KINDS, self.kind
        assert self.rest or not self.each, f"{self.name}: only a rest argument takes each word"


@dataclass(frozen=True)
class OptionSpec:
    """An option ``--name VALUE`` (or a flag ``--name`` when ``kind`` is None)."""

    name: str
    kind: str | None
    help: str
    repeat: bool = False

    def __post_init__(self) -> None:
        assert self.name.startswith("--"), self.name
        assert self.kind is None or self.kind in ARGUMENT_KINDS, self.kind

    @property
    def key(self) -> str:
        """The attribute name in a parsed invocation: ``--drop-fault`` is ``drop_fault``."""
        return self.name[2:].replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.kind is None


@dataclass(frozen=True)
class CommandSpec:
    name: str
    summary: str
    arguments: tuple[ArgumentSpec, ...] = ()
    options: tuple[OptionSpec, ...] = ()
    examples: tuple[str, ...] = ()
    long_running: bool = False
    """Runs simulations (branch, fanout, minimize...): front ends run it in a worker with progress."""
    aliases: tuple[str, ...] = field(default=())

    @property
    def usage(self) -> str:
        words = [self.name]
        for argument in self.arguments:
            text = argument.name.upper() + ("..." if argument.rest else "")
            words.append(text if argument.required else f"[{text}]")
        for option in self.options:
            text = (
                option.name
                if option.is_flag
                else f"{option.name} {option.kind.upper() if option.kind else ''}"
            )
            words.append(f"[{text}]..." if option.repeat else f"[{text}]")
        return " ".join(words)

    def option(self, name: str) -> OptionSpec | None:
        for option in self.options:
            if option.name == name:
                return option
        return None

    @property
    def help_detail(self) -> str:
        """Usage, summary, arguments, options, aliases and examples: what ``help NAME`` shows."""
        lines = [self.usage, "", self.summary]
        if self.arguments:
            lines += ["", "arguments:"] + [f"  {a.name.upper():<12} {a.help}" for a in self.arguments]
        if self.options:
            lines += ["", "options:"] + [
                f"  {o.name + ('' if o.is_flag else ' ' + (o.kind or '').upper()):<24} {o.help}"
                for o in self.options
            ]
        if self.aliases:
            lines += ["", f"aliases: {', '.join(self.aliases)}"]
        if self.examples:
            lines += ["", "examples:"] + [f"  {example}" for example in self.examples]
        return "\n".join(lines)


def _branch_option(help_text: str = "the branch to act on (default: the cursor's branch)") -> OptionSpec:
    return OptionSpec("--branch", "branch", help_text)


COMMAND_SPECS: tuple[CommandSpec, ...] = (
    CommandSpec(
        "goto",
        "move the cursor to the state after every event with time <= T (or after event #N)",
        (ArgumentSpec("time", "time", "950, 950ms, 1.5s, 120us, 80ns or #N (an event number)"),),
        (_branch_option("switch the cursor to this branch first"),),
        examples=("goto 950", "goto 1.2s", "goto #4096", "goto 990 --branch b1"),
    ),
    CommandSpec(
        "step",
        "run N more events forward (default 1), or to the N-th next completed collective (torch)",
        (ArgumentSpec("count", "count", "how many events (collectives with --collective)", required=False),),
        (
            OptionSpec(
                "--collective",
                None,
                "move by collectives: to the event that completes the N-th next one, of any rank (torch runs)",
            ),
        ),
        examples=("step", "step 100", "step --collective", "step --collective 10"),
    ),
    CommandSpec(
        "back",
        "go back N events (default 1): restore the nearest snapshot and replay",
        (ArgumentSpec("count", "count", "how many events (collectives with --collective)", required=False),),
        (
            OptionSpec(
                "--collective",
                None,
                "move by collectives: after the N-th completing event before the cursor's (torch runs)",
            ),
        ),
        examples=("back", "back 5", "back --collective"),
    ),
    CommandSpec("where", "where the cursor stands: branch, time, event number, next event, failure"),
    CommandSpec(
        "events",
        "the event log around the cursor",
        (),
        (
            OptionSpec("--node", "node", "only events delivered to this node"),
            OptionSpec("--kind", "word", "only events of this kind"),
            OptionSpec("--count", "count", "how many rows (default 20)"),
            OptionSpec("--after", None, "show the events after the cursor instead of before it"),
        ),
        examples=("events", "events --node rank3 --count 50", "events --kind fault"),
    ),
    CommandSpec(
        "print",
        "the state at the cursor under a path (arrays summarized)",
        (
            ArgumentSpec(
                "path", "path", "a state path, wildcards allowed (default: the top level)", required=False
            ),
        ),
        (OptionSpec("--depth", "count", "levels to expand (default 2)"),),
        examples=("print nodes/rank3", "print nodes/*/step", "print faults"),
    ),
    CommandSpec(
        "watch",
        "watch a path; with --previous or --next jump to where it last or next changes (a reverse watchpoint)",
        (ArgumentSpec("path", "path", "the path to watch", required=False),),
        (
            OptionSpec("--previous", None, "go back to the last event that changed the path"),
            OptionSpec("--next", None, "go forward to the next event that changes the path"),
            OptionSpec("--clear", None, "remove every watch (or the named one)"),
        ),
        examples=("watch nodes/rank3/step", "watch nodes/rank3/weights --previous", "watch --clear"),
    ),
    CommandSpec(
        "find-first",
        "the first moment a predicate holds, and the nodes it holds for",
        (ArgumentSpec("predicate", "predicate", "e.g. nonfinite(nodes/*/weights)", rest=True),),
        (
            _branch_option(),
            OptionSpec("--from", "time", "search from this time on (default: the start)"),
            OptionSpec("--go", None, "move the cursor there"),
            OptionSpec(
                "--scan",
                None,
                "evaluate after every event instead of bisecting snapshots (exact for a predicate "
                "that can stop holding; changed() always scans)",
            ),
        ),
        examples=(
            "find-first nonfinite(nodes/*/weights)",
            "find-first differ(nodes/*/weights)",
            "find-first --scan --from 950 differ(nodes/*/weights)",
        ),
        long_running=True,
    ),
    CommandSpec(
        "branch",
        "run an alternate future from time T with changes; stored in the recording as b1, b2, ...",
        (),
        (
            OptionSpec("--at", "time", "where the future starts (default: the cursor)"),
            OptionSpec("--from", "branch", "the branch to fork (default: the cursor's branch)"),
            OptionSpec("--branch-seed", "int", "a new branch key for every choice after T"),
            OptionSpec("--drop-fault", "fault", "remove a fault from the schedule", repeat=True),
            OptionSpec(
                "--add-fault",
                "fault-spec",
                "add a fault: kind=drop,target=r3,t_start=950ms,... (or a JSON record)",
                repeat=True,
            ),
            OptionSpec(
                "--edit-fault",
                "fault-edit",
                "change a fault: ID:KEY=VALUE,... (e.g. f3:t_end=990ms,probability=0.5)",
                repeat=True,
            ),
            OptionSpec("--set", "setting", "change a branchable config key (e.g. bug=none)", repeat=True),
            OptionSpec("--name", "name", "name the branch (default: the next free bN)"),
        ),
        examples=(
            "branch --at 950 --branch-seed 1",
            "branch --drop-fault f3",
            "branch --set bug=none --name fixed",
        ),
        long_running=True,
    ),
    CommandSpec("branches", "the branch tree with each branch's outcome"),
    CommandSpec(
        "fanout",
        "many futures from one moment, each with a new branch key: the failure rate by signature",
        (),
        (
            OptionSpec("--at", "time", "the moment (default: the cursor)"),
            OptionSpec("--samples", "count", "how many futures (default 20)"),
            _branch_option(),
            OptionSpec("--keep", None, "keep every future: store each as a branch (b1, b2, ...)"),
        ),
        examples=("fanout --at 950 --samples 50",),
        long_running=True,
    ),
    CommandSpec(
        "likelihood",
        "the fan-out failure rate at every snapshot: where it jumps to 1 is the point of no return",
        (),
        (
            OptionSpec("--samples", "count", "futures per snapshot (default 10)"),
            _branch_option(),
            OptionSpec("--points", "count", "snapshots to fan out from, evenly spaced (default 64)"),
            OptionSpec("--from", "time", "only snapshots at or after this time"),
            OptionSpec("--to", "time", "only snapshots at or before this time"),
        ),
        examples=("likelihood --samples 10", "likelihood --samples 20 --from 900 --to 1100"),
        long_running=True,
    ),
    CommandSpec(
        "compare",
        "two branches side by side: outcomes, metric curves and their first divergence",
        (ArgumentSpec("a", "branch", "the first branch"), ArgumentSpec("b", "branch", "the second branch")),
        (
            OptionSpec(
                "--reference",
                "file",
                "a real run's losses (step,loss CSV or JSON lines) laid over both branches",
            ),
            OptionSpec(
                "--rtol", "word", "with --reference: outside when |sim - ref| > R * |ref| (default 1e-3)"
            ),
            OptionSpec("--reference-metric", "word", "with --reference: the metric compared (default loss)"),
            OptionSpec("--reference-node", "node", "with --reference: whose values (default r0)"),
        ),
        examples=("compare main b1", "compare main b1 --reference real_run.csv --rtol 1e-2"),
        long_running=True,
    ),
    CommandSpec(
        "diff",
        "the state diff between two branches at one time (default: their first divergence)",
        (ArgumentSpec("a", "branch", "the first branch"), ArgumentSpec("b", "branch", "the second branch")),
        (
            OptionSpec("--at", "time", "compare the states at this time"),
            OptionSpec("--path", "path", "only under this path"),
            OptionSpec(
                "--first-divergence", None, "compare at the first divergence (the default without --at)"
            ),
            OptionSpec(
                "--ops",
                None,
                "a torch run: re-execute the first step in which they differ on both branches and name "
                "the first torch ops whose outputs differ",
            ),
        ),
        examples=("diff main b1", "diff main b1 --at 990 --path nodes/*/weights", "diff main b1 --ops"),
        long_running=True,
    ),
    CommandSpec(
        "divergence",
        "the first event whose effects differ between two branches",
        (ArgumentSpec("a", "branch", "the first branch"), ArgumentSpec("b", "branch", "the second branch")),
        (OptionSpec("--go", None, "move the cursor there (on the first branch)"),),
        examples=("divergence main b1",),
        long_running=True,
    ),
    CommandSpec(
        "rerun",
        "the recorded seed, faults and choices on today's code: did my fix fix it?",
        (),
        (OptionSpec("--set", "setting", "change a config key for the rerun (e.g. bug=none)", repeat=True),),
        examples=("rerun", "rerun --set bug=none"),
        long_running=True,
    ),
    CommandSpec(
        "minimize",
        "shrink the failure to a minimal reproduction with the same signature",
        (),
        (
            _branch_option("the failing branch to minimize (default: the cursor's)"),
            OptionSpec("--out", "file", "write the repro recording here (.ttr)"),
            OptionSpec("--pytest", "file", "write a standalone pytest file that replays it"),
            OptionSpec("--force", None, "write over repro files that exist (else they are refused)"),
            OptionSpec("--max-runs", "count", "stop after this many runs"),
            OptionSpec("--max-seconds", "seconds", "stop after this much wall time"),
            OptionSpec("--max-stall", "count", "stop after this many runs without progress"),
        ),
        examples=("minimize", "minimize --out repro.ttr --pytest test_repro.py --max-runs 500"),
        long_running=True,
    ),
    CommandSpec(
        "faults",
        "the fault schedule of a branch",
        (),
        (_branch_option(),),
        examples=("faults", "faults --branch b1"),
    ),
    CommandSpec(
        "export",
        "export a branch as Chrome trace events, to open in Perfetto",
        (),
        (OptionSpec("--perfetto", "file", "the JSON file to write"), _branch_option()),
        examples=("export --perfetto run.json",),
        long_running=True,
    ),
    CommandSpec(
        "explain",
        "why a branch failed: a causal chain from the detector back to the faults and choices it comes from",
        (ArgumentSpec("branch", "branch", "the failing branch (default: the cursor's)", required=False),),
        examples=("explain", "explain b2"),
        long_running=True,
    ),
    CommandSpec(
        "origin",
        "which event last wrote a state value, from what it read, and what caused that event",
        (ArgumentSpec("path", "path", "a state path (e.g. nodes/r3/skip_local)"),),
        (
            OptionSpec("--at", "time", "the value at this time (default: the cursor)"),
            OptionSpec("--go", None, "move the cursor to the writing event"),
        ),
        examples=("origin nodes/r3/skip_local --at 990", "origin nodes/r3/grad_pending --go"),
        long_running=True,
    ),
    CommandSpec(
        "help",
        "the commands, or one command's usage, options and examples",
        (ArgumentSpec("command", "command", "a command name", required=False),),
        examples=("help", "help branch"),
        aliases=("?",),
    ),
)

COMMANDS: dict[str, CommandSpec] = {spec.name: spec for spec in COMMAND_SPECS}
ALIASES: dict[str, str] = {alias: spec.name for spec in COMMAND_SPECS for alias in spec.aliases}
COMMAND_NAMES: tuple[str, ...] = tuple(COMMANDS)
