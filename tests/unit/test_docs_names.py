"""What README.md and the docs pages name exists, and the pages keep the shape the docs rules
give them (CONTRIBUTING.md, "Documentation").  No Redis: the CLI is read from click's tree.

- Every `shardq ...` command line in a shell block of a page (includes put in place, as the
  site shows it) resolves to a command of the tree, each of its options is one that command
  (or the root group) takes, and click parses the whole line.
- Every `shardq ...` in inline code names an existing command path and existing options (its
  values may be placeholders: `shardq job get -q Q ID`; `a|b` names alternatives).
- Every dotted `shardq.x.y` in inline code resolves, and every `Class.attribute` of a public
  class (`ProducerSettings.sticky_jobs`, `Client.result`) exists.
- The guides show Python only from examples/ (which tests/examples runs), and a shell block a
  guide writes inline holds only commands that cannot run there (processes that run until
  stopped, local servers, slot moves): every other one comes from examples/cli/.
- Sizes: README.md at most 12 KB, getting started under 10 KB, each guide 2-10 KB, capacity
  planning at most 25 KB, benchmarks at most 15 KB (as the site shows them).
- User pages carry no commit hashes and no references to the project's issue tracker.
(The Python blocks' imports and calls are checked by test_readme.py.)
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import click
import pytest
from support import doccode

from shardq.cli import main as cli

ROOT = doccode.ROOT
GUIDES = doccode.DOCS / "guides"
TRACING = ROOT / "shardq" / "tracing.py"
#: Commands a shell block of a guide may write inline: they run until stopped, start local
#: servers, or move data between primaries, so tests/examples cannot run them as a block.
NOT_RUN_INLINE = (
    ("worker", "run"),
    ("dispatcher", "run"),
    ("web",),
    ("balancer", "run"),
    ("queue", "resize"),
    ("dev",),
    ("demo",),
    ("bench",),
)
#: Pages for contributors (about the code, or design records kept out of the site): the rules
#: for user pages on commits and issues do not apply.
CONTRIBUTOR_PAGES = {
    "architecture.md",
    "architecture-modules.md",
    "architecture-jobs.md",
    "architecture-processes.md",
    "resize.md",
}


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


PAGES = doccode.pages()
SITE = {page: doccode.expand(page.read_text()) for page in PAGES}


# -- the command tree ------------------------------------------------------------------------


def resolve(words: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """The command path the words name (options before the command are the root group's),
    the command, and the rest."""
    cmd: click.Command = cli
    path: list[str] = []
    rest = list(words)
    while isinstance(cmd, click.Group):
        while rest and rest[0].startswith("-"):  # root options (--url X, --log-level X)
            option = rest.pop(0)
            param = _option(cmd, option)
            assert param is not None, f"`shardq {' '.join(path)}` has no option {option}"
            if "=" not in option and not getattr(param, "is_flag", False) and rest:
                rest.pop(0)
        assert rest, f"`shardq {' '.join(path)}` needs a subcommand"
        name = rest.pop(0)
        sub = _sub(cmd, name)
        assert sub is not None, f"`shardq {' '.join(path)}` has no command {name!r}"
        # an old spelling kept for users' scripts (a hidden alias): the docs write the new one
        assert not _old_spelling(sub), f"`shardq {' '.join([*path, name])}` is an old spelling"
        path.append(name)
        cmd = sub
    return path, cmd, rest


def _old_spelling(cmd: click.Command) -> bool:
    """A hidden command (not a hidden group, like `dev`): an old name kept for users' scripts."""
    return cmd.hidden and not isinstance(cmd, click.Group)


def _sub(group: click.Group, name: str) -> click.Command | None:
    """A subcommand as the CLI finds it (the root group loads its commands' modules lazily)."""
    with click.Context(group) as ctx:
        return group.get_command(ctx, name)


def _option(cmd: click.Command, token: str) -> click.Parameter | None:
    name = token.split("=", 1)[0]
    for param in cmd.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    if name == "--help":
        return click.Option(["--help"], is_flag=True)
    return None


def check_command_line(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cmd, rest = resolve(argv)
    for token in rest:
        if token.startswith("-") and token != "-" and not re.fullmatch(r"-\d.*", token):
            param = _option(cmd, token) or _option(cli, token)
            assert param is not None, (
                f"`shardq {' '.join(path)}` has no option {token.split('=', 1)[0]}"
            )
            assert not getattr(param, "hidden", False), (
                f"`shardq {' '.join(path)} {token}` is an old spelling"
            )
    with monkeypatch.context() as patched:
        for name, value in env.items():
            patched.setenv(name, value)
        try:
            cmd.make_context("shardq " + " ".join(path), list(rest))
        except click.BadParameter as exc:
            if isinstance(getattr(exc.param, "type", None), click.Path):
                return  # a path that is a placeholder here (`--server-bin DIR`)
            raise AssertionError(f"`shardq {' '.join(argv)}`: {exc.format_message()}") from exc
        except click.ClickException as exc:
            raise AssertionError(f"`shardq {' '.join(argv)}`: {exc.format_message()}") from exc


def shell_commands() -> list[tuple[str, doccode.Command]]:
    out = []
    for page, text in SITE.items():
        for block in doccode.blocks(text):
            if block.lang in doccode.SHELL:
                out += [
                    (f"{page_id(page)}:{block.line}", c)
                    for c in doccode.shardq_commands(block.code)
                ]
    return out


def test_the_pages_have_shell_commands() -> None:
    found = shell_commands()
    assert len(found) >= 60
    assert {"README.md", "docs/getting-started.md", "docs/guides/periodic.md"} <= {
        where.split(":")[0] for where, _ in found
    }


@pytest.mark.parametrize(("where", "command"), shell_commands(), ids=lambda v: str(v)[:80])
def test_every_shell_command_exists_and_parses(
    where: str, command: doccode.Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        check_command_line(command.argv, command.env, monkeypatch)
    except AssertionError as exc:
        raise AssertionError(f"{where}: {command.line}: {exc}") from None


# -- inline code -----------------------------------------------------------------------------


def inline_commands() -> list[tuple[str, str]]:
    out = []
    for page, text in SITE.items():
        for span in doccode.inline_code(text):
            if span.startswith("shardq ") or span == "shardq":
                out.append((page_id(page), span))
    return out


def check_inline_command(span: str) -> None:
    """The command path and the options of an inline mention; values are not checked."""
    words = [w for w in re.split(r"\s+", span.replace("[", " ").replace("]", " ")) if w][1:]
    words = [w for w in words if w not in ("...", "|")]
    cmd: click.Command = cli
    path: list[str] = []
    i = 0
    while isinstance(cmd, click.Group) and i < len(words) and not words[i].startswith("-"):
        if words[i].startswith("<"):
            return  # `shardq <command> --help`: any command
        alternatives = words[i].split("|")
        subs = [_sub(cmd, a) for a in alternatives]
        if not all(subs):
            missing = [a for a, sub in zip(alternatives, subs, strict=True) if sub is None]
            raise AssertionError(f"`shardq {' '.join(path)}` has no command {missing[0]!r}")
        old = [a for a, sub in zip(alternatives, subs, strict=True) if sub and _old_spelling(sub)]
        assert not old, f"`shardq {' '.join([*path, old[0]])}` is an old spelling"
        path.append(words[i])
        nxt = subs[0]
        assert nxt is not None
        if len(alternatives) > 1:  # `pause|resume`: check the options against each
            for sub in subs[1:]:
                assert sub is not None
                _inline_options(sub, words[i + 1 :], path)
        cmd = nxt
        i += 1
    _inline_options(cmd, words[i:], path)


def _inline_options(cmd: click.Command, words: list[str], path: list[str]) -> None:
    for word in words:
        for token in word.split("|"):
            option = re.fullmatch(r"--?[a-zA-Z][\w-]*(=.*)?", token) is not None
            if option and _option(cmd, token) is None and _option(cli, token) is None:
                if isinstance(cmd, click.Group):
                    raise AssertionError(f"`shardq {' '.join(path)}` needs a subcommand")
                raise AssertionError(
                    f"`shardq {' '.join(path)}` has no option {token.split('=', 1)[0]}"
                )


def test_the_pages_mention_commands_inline() -> None:
    assert len(inline_commands()) >= 150


@pytest.mark.parametrize(("page", "span"), inline_commands(), ids=lambda v: str(v)[:80])
def test_every_inline_command_exists(page: str, span: str) -> None:
    try:
        check_inline_command(span)
    except AssertionError as exc:
        raise AssertionError(f"{page}: `{span}`: {exc}") from None


PYTHON_NAME = re.compile(r"(?:shardq\.[a-z_][\w.]*|[A-Z]\w+\.[a-z_]\w*)(?:\(\))?")


def inline_names() -> list[tuple[str, str]]:
    import shardq

    out = []
    for page, text in SITE.items():
        for span in doccode.inline_code(text):
            if not PYTHON_NAME.fullmatch(span):
                continue
            name = span.removesuffix("()")
            head = name.split(".", 1)[0]
            if head == "shardq" or head in shardq.__all__:
                out.append((page_id(page), name))
    return out


def test_the_pages_name_python_objects_inline() -> None:
    names = {name for _, name in inline_names()}
    assert len(names) >= 30
    assert {"Client.get", "ProducerSettings.sticky_jobs"} <= names


@pytest.mark.parametrize(("page", "name"), inline_names(), ids=lambda v: str(v)[:80])
def test_every_inline_python_name_exists(page: str, name: str) -> None:
    import shardq

    if name in TRACING.read_text():
        return  # an attribute of shardq's spans (shardq.partition, ...), defined there
    parts = name.split(".")
    if parts[0] == "shardq":
        obj: object = shardq
        done = ["shardq"]
        for part in parts[1:]:
            done.append(part)
            if hasattr(obj, part):
                obj = getattr(obj, part)
                continue
            try:
                obj = importlib.import_module(".".join(done))
            except ImportError:
                raise AssertionError(f"{page}: `{name}`: no {'.'.join(done)}") from None
        return
    cls = getattr(shardq, parts[0])
    fields = getattr(cls, "__dataclass_fields__", {})
    # An instance attribute its __init__ sets (``self.schedules = ...``) counts too.
    assigned = re.search(rf"\bself\.{re.escape(parts[1])}\s*[:=]", inspect.getsource(cls))
    found = hasattr(cls, parts[1]) or parts[1] in fields or assigned is not None
    assert found, f"{page}: `{name}`: no such attribute"


# -- the checkers can fail -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("shardq job enqueue -q q t --no-such-option 1", "has no option --no-such-option"),
        ("shardq jobs get -q q x", "has no command 'jobs'"),
        ("shardq job get x", "Missing option"),
        ("shardq queue create -q q --partitions many", "is not a valid integer"),
    ],
)
def test_the_shell_checker_fails_on_what_does_not_exist(
    line: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = doccode.shardq_command(line)
    assert command is not None
    with pytest.raises(AssertionError, match=expected):
        check_command_line(command.argv, command.env, monkeypatch)


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        ("shardq job get -q Q --nope", "has no option --nope"),
        ("shardq schedule pause|unpause -q Q NAME", "has no command 'unpause'"),
        ("shardq dlq list|show --queue Q", None),
        ("shardq queue", None),
        ("shardq job get|cancel|reschedule -q Q JOB_ID", None),
    ],
)
def test_the_inline_checker(span: str, expected: str | None) -> None:
    if expected is None:
        check_inline_command(span)
    else:
        with pytest.raises(AssertionError, match=expected):
            check_inline_command(span)


def test_the_name_checker_fails_on_a_missing_attribute() -> None:
    with pytest.raises(AssertionError, match="no such attribute"):
        test_every_inline_python_name_exists("x.md", "WorkerSettings.no_such_setting")
    with pytest.raises(AssertionError, match=r"no shardq\.nowhere"):
        test_every_inline_python_name_exists("x.md", "shardq.nowhere.x")


# -- the shape of the pages ------------------------------------------------------------------


def guide_blocks() -> list[tuple[str, doccode.Block]]:
    out = []
    for page in sorted(GUIDES.glob("*.md")):
        out += [(page_id(page), b) for b in doccode.blocks(page.read_text())]
    return out


def test_guides_show_python_only_from_examples() -> None:
    inline = [
        f"{where}:{b.line}"
        for where, b in guide_blocks()
        if b.lang == "python" and not doccode.includes(b.code)
    ]
    assert not inline, f"python written inline in a guide (put it in examples/guides/): {inline}"


def test_guides_show_runnable_commands_only_from_examples() -> None:
    problems = []
    for where, block in guide_blocks():
        if block.lang not in doccode.SHELL or doccode.includes(block.code):
            continue
        for command in doccode.shardq_commands(block.code):
            if not any(command.argv[: len(k)] == list(k) for k in NOT_RUN_INLINE):
                problems.append(f"{where}:{block.line}: {command.line}")
    assert not problems, (
        "commands a guide writes inline that tests/examples could run: put them in "
        f"examples/cli/<guide>.sh and include them: {problems}"
    )


def test_every_example_file_a_guide_includes_exists() -> None:
    for text in (p.read_text() for p in PAGES):
        for target in doccode.includes(text):
            doccode.included(target)  # raises LookupError naming what is missing


def test_every_guide_script_is_shown_somewhere() -> None:
    """No runnable guide file drifts unseen: each one is included by some page."""
    included = {t.split(":")[0] for p in PAGES for t in doccode.includes(p.read_text())}
    for folder in ("examples/guides", "examples/cli"):
        for path in sorted((ROOT / folder).iterdir()):
            if path.suffix in (".py", ".sh") and path.name != "fleet.py":
                assert f"{folder}/{path.name}" in included, f"{folder}/{path.name} is in no page"


SIZES = [
    ("README.md", 0, 12 * 1024),
    ("docs/getting-started.md", 0, 10 * 1024 - 1),
    ("docs/capacity.md", 0, 25 * 1024),
    ("docs/benchmarks.md", 0, 15 * 1024),
    *((f"docs/guides/{p.name}", 2 * 1024, 10 * 1024) for p in sorted(GUIDES.glob("*.md"))),
]


@pytest.mark.parametrize(("page", "least", "most"), SIZES, ids=lambda v: str(v))
def test_page_sizes(page: str, least: int, most: int) -> None:
    size = len(doccode.expand((ROOT / page).read_text()).encode())
    assert least <= size <= most, f"{page} is {size} bytes as the site shows it: {least}-{most}"


def test_there_is_a_guide_per_feature() -> None:
    assert len(list(GUIDES.glob("*.md"))) >= 17


HASH = re.compile(r"(?<![\w/.-])`?(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}`?(?![\w/.-])")
ISSUE = re.compile(r"\bissues? \d+", re.IGNORECASE)


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if p.name not in CONTRIBUTOR_PAGES] + [ROOT / "CHANGELOG.md"],
    ids=page_id,
)
def test_user_pages_name_no_commits_and_no_issues(page: str | Path) -> None:
    text = doccode.expand(Path(page).read_text())
    text = re.sub(r"bench/reference/[\w./*-]+", "", text)  # stored outputs are named by commit
    hashes = HASH.findall(text)
    issues = ISSUE.findall(text)
    assert not hashes and not issues, f"{page_id(Path(page))}: commits {hashes}, issues {issues}"


def test_the_readme_python_is_the_quickstart_files() -> None:
    """README.md cannot include files (it is read on the forge and the package index): each of
    its Python blocks is an example file as it is, which tests/examples runs."""
    files = {p: p.read_text() for p in (ROOT / "examples").rglob("*.py")}
    blocks = [
        b.code for b in doccode.blocks((ROOT / "README.md").read_text()) if b.lang == "python"
    ]
    assert blocks, "README.md has no Python example"
    for code in blocks:
        same = [p for p, text in files.items() if text.strip() == code.strip()]
        assert same, f"README.md's block is no file of examples/ as it is:\n{code}"
