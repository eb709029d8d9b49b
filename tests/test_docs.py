"""The docs tell the truth: every command is documented, every column too,
and CI runs the README's test command as written."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.schema import TABLES
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()
SCHEMA = (ROOT / "docs" / "schema.md").read_text()
runner = CliRunner()

COMMANDS = [["ingest"], ["query"], ["files"], ["jobs"], ["diagnose"], ["rediagnose"], ["report"], ["serve"], ["db", "upgrade"], ["db", "downgrade"], ["db", "current"]]


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def test_readme_opens_with_two_setup_commands_and_ci_runs_the_second():
    blocks = _shell_blocks(README)
    first, second = blocks[0].strip(), blocks[1].strip()
    assert "frlake ingest" in first and "pytest" in second
    ci = (ROOT / ".ci" / "run").read_text()
    assert second in ci.splitlines()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_and_is_in_the_readme(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert len(result.output) > 100
    assert f"frlake {' '.join(command)}" in README


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_column_is_documented(table):
    section = SCHEMA.split(f"### `{table}`", 1)[1].split("\n### ", 1)[0]
    for field in TABLES[table]:
        assert f"`{field.name}`" in section, f"{table}.{field.name} is not in docs/schema.md"


@pytest.mark.slow
def test_example_queries_run(corpus, fl):
    """Every example answers something on the corpus and the producer fixtures, beside a few bad files."""
    from tests.helpers import FIXTURES

    fl.ingest([corpus, FIXTURES / "bad", FIXTURES / "producers"])
    con = fl.connect()
    blocks = re.findall(r"```sql\n(.*?)```", SCHEMA, re.S)
    queries = [q.strip() for block in blocks for q in block.split(";") if q.strip()]
    assert len(queries) >= 9
    for q in queries:
        q = "\n".join(line for line in q.splitlines() if not line.startswith("--"))
        assert con.execute(q).fetchall(), f"the example answers nothing on the corpus:\n{q}"


def test_every_api_route_is_documented(tmp_path):
    from frlake.config import Settings
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    api_doc = (ROOT / "docs" / "api.md").read_text()
    app = create_app(ServerConfig(Settings.resolve(tmp_path / "lake")))
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("api."):
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", rule.rule)
            path = path.replace("<attempt>", "<n>")
            assert path in api_doc, f"{path} is not in docs/api.md"


@pytest.mark.slow
def test_the_readme_python_example_runs_as_a_script(tmp_path):
    """Saved as a script and run by a fresh interpreter (worker processes and
    all), as a user would, not inside pytest's process."""
    block = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    (tmp_path / "example.py").write_text(block)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "32 dumps ingested, 0 rejected" in done.stdout, done.stdout
    assert "hang" in done.stdout or "mismatch" in done.stdout, done.stdout


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_why_and_no_file_is_rejected(tmp_path):
    """Python's multiprocessing runs a guard-less script again in every worker,
    so the workers die: an environment failure, not a verdict on the files."""
    block = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    body = block.split("def main() -> None:\n", 1)[1].split("\n\nif __name__", 1)[0]
    unguarded = block.split("def main()", 1)[0] + "\n".join(line[4:] for line in body.splitlines())
    (tmp_path / "unguarded.py").write_text(unguarded)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    done = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr.splitlines()[-1]
    from frlake.session import Frlake

    lake = tmp_path / "frlake-lake"
    with Frlake.open(lake, f"sqlite:///{lake / 'catalog.db'}", must_exist=True) as fl:
        assert fl.catalog.files.records() == [], "nothing is recorded against the files"
    (tmp_path / "example.py").write_text(block)  # the guarded script then ingests every file
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "32 dumps ingested, 0 rejected" in done.stdout, done.stderr


def test_the_verdicts_are_documented_in_their_order():
    from frlake.entities import Verdict

    doc = (ROOT / "docs" / "diagnose.md").read_text()
    section = doc.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    positions = [section.find(f"`{v.value}`") for v in Verdict]
    assert -1 not in positions, "every verdict is in docs/diagnose.md"
    assert positions == sorted(positions), "in the order of precedence of frlake.entities.Verdict"


def test_every_view_and_column_a_query_sees_has_its_meaning_in_schema_md(corpus_lake, views):
    """The SQL console's schema browser reads the meanings from docs/schema.md:
    a new view or column without one fails here."""
    from frlake.query.schema_doc import meaning, schema_meanings
    from frlake.server.schema_browser import schema_browser, view_names

    con = views(corpus_lake.lake, corpus_lake.db_url)
    browser = schema_browser(con)
    assert [v["view"] for v in browser] == view_names()
    for v in browser:
        assert v["view"] in schema_meanings(), f"no ### `{v['view']}` section in docs/schema.md"
        assert v["columns"], f"{v['view']} has no columns"
        for c in v["columns"]:
            assert c["meaning"], f"{v['view']}.{c['name']} has no meaning in docs/schema.md"
    assert meaning("culprits", "started") == "started_ns as a timestamp (UTC)"


def test_query_help_lists_every_view():
    from frlake.cli.query import VIEW_NAMES
    from frlake.server.schema_browser import view_names

    assert [n for names in VIEW_NAMES.values() for n in names] == view_names()
    result = runner.invoke(app, ["query", "--help"], env={"COLUMNS": "200"})
    for name in view_names():
        assert name in result.output, name
