"""`genrun report --html`: the review page and the store index, opened in a real headless Chromium.

Snapshots come from the real runner (tests/_analysis_helpers.py); the pages from the real CLI
(`genrun.runner.cli.main`, in-process); the browser is Debian's `chromium` driven by Playwright
through its `executable_path` (no browser download). Screenshots are kept under pytest's tmp dir
and their paths printed (`pytest -s` shows them).
"""

import re
import shutil
from pathlib import Path

import pytest

from genrun.runner.cli import main
from genrun.schemas import layout

from _analysis_helpers import REPO, TINY_LM, copy_snapshot, edit_bytes, request_toml, snapshots  # noqa: F401 - fixture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:  # .ci/run installs it; a developer machine without it must say so, not pass
    pytest.fail("Debian's 'chromium' is needed for the browser tests: apt-get install -y chromium (.ci/run does this)",
                pytrace=False)

HOSTILE = '<script>window.__pwned = 1; alert("x")</script><img src=x onerror="window.__pwned = 2"><b>bold</b> & "quotes"'

ESCAPING_ENTRYPOINT = f'''
def echo_html(model, tokenizer, inputs, generation, **kwargs):
    encoded = tokenizer(inputs["prompt"], return_tensors="pt")
    out = model.generate(**encoded, **generation)
    return {HOSTILE!r} + " :: " + tokenizer.decode(out[0], skip_special_tokens=False)
'''


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (Debian's binary; Playwright never downloads one here)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Opened:
    """A page loaded from a file, with the console errors and dialogs it produced."""

    def __init__(self, browser, html: Path, javascript: bool = True) -> None:
        self.context = browser.new_context(java_script_enabled=javascript, viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(html.as_uri(), wait_until="load")

    def screenshot(self, path: Path) -> Path:
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def close(self) -> None:
        self.context.close()


def write_page(snapshot: Path, out: Path) -> Path:
    """`genrun report SNAPSHOT --html OUT` through the real CLI."""
    assert main(["report", str(snapshot), "--html", str(out)]) == 0
    return out


def assert_renders(opened: Opened, html: Path) -> None:
    """Loads with no console errors, asks nothing from the network, and every chart has a real size."""
    assert opened.errors == [], opened.errors
    assert [u for u in opened.requests if not u.startswith("file:")] == []
    charts = opened.page.locator("svg.chart")
    assert charts.count() >= 2, "throughput and memory charts expected"
    for i in range(charts.count()):
        box = charts.nth(i).bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 50, box
    assert "<script" not in html.read_text().lower()


def visible_text(opened: Opened, selector: str) -> list[str]:
    found = opened.page.locator(selector)
    return [found.nth(i).inner_text().strip() for i in range(found.count()) if found.nth(i).is_visible()]


# -- four snapshot kinds the page must show ----------------------------------------------------------------------


def test_succeeded_snapshot_reads_well(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    html = write_page(snapshots.get("eos"), tmp_path / "eos.html")
    opened = Opened(browser, html)
    try:
        assert_renders(opened, html)
        assert visible_text(opened, ".stop-reason") == ["eos"]
        assert "succeeded" in opened.page.locator("#headline").inner_text()
        assert visible_text(opened, "tr.finding-FAIL") == []
        commands = visible_text(opened, "pre.command")
        assert commands[0] == f"genrun signoff {snapshots.get('eos')} --decision accept"
        note = opened.page.locator("#signoff ~ p").first.inner_text()  # under the digest table, so it points up
        assert "digest shown above" in note and "below" not in note, note
        body = opened.page.locator("body").inner_text()
        for words in ("max_new_tokens", "request", "tokens/s per row", "MiB", "time since the run started (s)", "Budget vs actual",
                      "Timings", "plan digest", "snapshot digest"):
            assert words in body, words
        opened.screenshot(tmp_path / "eos.png")
    finally:
        opened.close()


def test_dtype_and_device_are_listed_once(snapshots, tmp_path: Path) -> None:  # noqa: F811
    """The request's rows named them, then the identity's again (issue 41, item 11); a run that resolved `auto` would
    name them a second time as `dtype as run`."""
    text = write_page(snapshots.get("eos"), tmp_path / "eos.html").read_text()
    request_section = text.split('<h2 id="request">', 1)[1].split("<h2", 1)[0]
    named = re.findall(r"<th>((?:dtype|device)[^<]*)</th>", request_section)
    assert named == ["dtype", "device"], named


def test_failed_snapshot_shows_the_exception_and_its_fail(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    html = write_page(snapshots.get("exception"), tmp_path / "exception.html")
    opened = Opened(browser, html)
    try:
        assert_renders(opened, html)
        assert visible_text(opened, ".stop-reason") == ["exception"]
        assert "failed" in opened.page.locator("#headline").inner_text()
        warned = visible_text(opened, "tr.finding-WARN")
        assert any(row.startswith("WARN") and "completeness" in row and "failed with ValueError" in row for row in warned), warned
        stops = opened.page.locator("#stops").locator("xpath=following-sibling::table[1]").inner_text()
        assert "ValueError: injected failure after 4 new tokens" in stops
        opened.screenshot(tmp_path / "exception.png")
    finally:
        opened.close()


def test_interrupted_snapshot(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    html = write_page(snapshots.interrupted(), tmp_path / "interrupted.html")
    opened = Opened(browser, html)
    try:
        assert_renders(opened, html)
        assert "interrupted" in opened.page.locator("#headline").inner_text()
        assert visible_text(opened, ".stop-reason") == ["interrupted"]
    finally:
        opened.close()


def test_tampered_snapshot_shows_fail_checks_as_text(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    tampered = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    assert main(["signoff", str(tampered), "--decision", "accept", "--by", "owner@example.com"]) == 0  # unsigned, bound to the digest
    edit_bytes(tampered, layout.RESULT, lambda b: b.replace(b'"succeeded"', b'"succeeded" ', 1))
    edit_bytes(tampered, layout.MANIFEST, lambda b: b + b"\n")  # the seal changes too: the accept no longer matches
    html = write_page(tampered, tmp_path / "tampered.html")
    opened = Opened(browser, html)
    try:
        assert_renders(opened, html)
        fails = visible_text(opened, "tr.finding-FAIL")
        assert any(row.startswith("FAIL") and "manifest_integrity" in row for row in fails), fails
        assert "failed" in opened.page.locator("#verify-summary").inner_text()
        (signoff,) = visible_text(opened, "#signoff ~ table tr:has(td.invalid)")
        assert "owner@example.com" in signoff and "digest no longer matches" in signoff
        opened.screenshot(tmp_path / "tampered.png")
    finally:
        opened.close()


def test_killed_snapshot_is_shown_incomplete_with_no_command_to_accept(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    html = write_page(snapshots.killed(), tmp_path / "killed.html")
    opened = Opened(browser, html)
    try:
        assert opened.errors == []
        assert opened.page.locator("#headline").inner_text().startswith("incomplete: the run ended without a result")
        assert visible_text(opened, "pre.command") == []
        assert "nothing can be accepted until it is sealed" in opened.page.locator("body").inner_text()
        assert "Last ids in progress.ndjson" in opened.page.locator("body").inner_text()
    finally:
        opened.close()


def test_readable_with_scripts_disabled(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    html = write_page(snapshots.get("eos"), tmp_path / "noscript.html")
    opened = Opened(browser, html, javascript=False)
    try:
        assert visible_text(opened, ".stop-reason") == ["eos"]
        assert opened.page.locator("svg.chart").first.bounding_box()["width"] > 100
    finally:
        opened.close()


def test_batch_names_per_row_and_summed_rates(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    html = write_page(snapshots.get("batch"), tmp_path / "batch.html")
    opened = Opened(browser, html)
    try:
        assert_renders(opened, html)
        legends = " | ".join(opened.page.locator("svg.chart .legend").all_text_contents())  # SVG text: no inner_text
        assert "tokens/s per row, cumulative since first token" in legends and "tokens/s summed over 2 rows, cumulative" in legends
        coverage = visible_text(opened, "#coverage ~ table tr")
        assert any("row 0:" in r for r in coverage) and any("row 1:" in r for r in coverage)
    finally:
        opened.close()


@pytest.fixture(scope="module")
def ddim_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real diffusers snapshot: the bundled tiny DDIM pipeline, 2 steps, through `genrun run`."""
    from _diffusion_helpers import TINY_DDIM, diffusion_request, only_snapshot

    work = tmp_path_factory.mktemp("ddim")
    request = work / "ddim.toml"
    request.write_text(diffusion_request(TINY_DDIM, name="ddim", steps=2))
    assert main(["run", str(request), "--store", str(work / "store")]) == 0
    return only_snapshot(work / "store")


def test_diffusers_snapshot_shows_its_pipeline_call(ddim_snapshot: Path, browser, tmp_path: Path) -> None:
    """A diffusers snapshot's page: the pipeline call (a typed record, not a dict) as a table under the heading its model
    declares, the step count as the unit."""
    html = write_page(ddim_snapshot, tmp_path / "ddim.html")
    opened = Opened(browser, html)
    try:
        assert_renders(opened, html)
        assert visible_text(opened, ".stop-reason") == ["completed"]
        heading = opened.page.locator("#call-config")
        assert heading.inner_text() == "Pipeline call (as made)"  # the heading its model declares
        pipeline = heading.locator("xpath=following-sibling::table[1]").inner_text()
        assert re.search(r"pipeline_class\s+DDIMPipeline", pipeline) and re.search(r"num_inference_steps\s+2", pipeline), pipeline
        assert "schema_version" not in pipeline
        assert "2 steps" in opened.page.locator("#headline").inner_text()
    finally:
        opened.close()


# -- escaping -----------------------------------------------------------------------------------------------------


def test_html_in_prompt_and_output_is_text_never_executed(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    from genrun.runner.execute import execute_snapshot
    from genrun.runner.plan import plan_request

    (tmp_path / "echo_entry.py").write_text(ESCAPING_ENTRYPOINT)
    request = tmp_path / "request.toml"
    request.write_text(request_toml("hostile", TINY_LM, f"count down from 3 : {HOSTILE}", {"max_new_tokens": 6, "do_sample": False},
                                    entrypoint={"callable": "echo_entry:echo_html"}))
    snapshot = plan_request(request, tmp_path / "store")
    execute_snapshot(snapshot, live=False)
    html = write_page(snapshot, tmp_path / "hostile.html")
    raw = html.read_text()
    assert "<script" not in raw.lower() and "onerror=" not in raw.replace("onerror=&#34;", "")
    assert "&lt;script&gt;" in raw
    opened = Opened(browser, html)
    try:
        assert opened.dialogs == [] and opened.errors == []
        assert opened.page.evaluate("window.__pwned === undefined")
        assert HOSTILE in opened.page.locator("pre.input").first.inner_text()
        assert HOSTILE in opened.page.locator("pre.output").first.inner_text()
        assert opened.page.locator("pre.input b, pre.output b, pre.input img").count() == 0
    finally:
        opened.close()


# -- the store index ----------------------------------------------------------------------------------------------


def test_store_index_one_line_per_snapshot(snapshots, browser, tmp_path: Path) -> None:  # noqa: F811
    store = tmp_path / "store"
    good = copy_snapshot(snapshots.get("eos"), store)
    bad = copy_snapshot(snapshots.get("budget"), store)
    edit_bytes(bad, layout.RESULT, lambda b: b + b" ")
    html = tmp_path / "index.html"
    assert main(["report", "--store", str(store), "--html", str(html), "--pages"]) == 0  # --pages: verify each, write its page
    opened = Opened(browser, html)
    try:
        assert opened.errors == []
        rows = {r.split()[0]: r for r in visible_text(opened, "tr.snapshot")}
        assert set(rows) == {good.name, bad.name}
        assert re.search(r"succeeded\s+yes\s+eos\s+\d+\s+0\s+no sign-offs", rows[good.name]), rows[good.name]
        assert re.search(r"max_new_tokens\s+\d+\s+[1-9]", rows[bad.name]), rows[bad.name]
        opened.screenshot(tmp_path / "index.png")
        opened.page.click(f"text={bad.name}")  # each id opens its review page
        opened.page.wait_for_load_state("load")
        assert opened.page.url.endswith(f"index.pages/{bad.name}.html") and bad.name in opened.page.title() + opened.page.inner_text("h1")
        assert opened.errors == []
    finally:
        opened.close()


def test_store_index_defaults_to_the_store_every_command_uses(snapshots, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    """`report --html FILE` without SNAPSHOT or --store: the index of $GENRUN_STORE, else of ./snapshots."""
    from genrun.runner.store import STORE_ENV

    from_env = copy_snapshot(snapshots.get("eos"), tmp_path / "env-store")
    in_cwd = copy_snapshot(snapshots.get("budget"), tmp_path / "work" / "snapshots")
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env-store"))
    assert main(["report", "--html", str(tmp_path / "env.html")]) == 0
    monkeypatch.delenv(STORE_ENV)
    assert main(["report", "--html", str(tmp_path / "cwd.html")]) == 0
    assert from_env.name in (tmp_path / "env.html").read_text() and in_cwd.name not in (tmp_path / "env.html").read_text()
    assert in_cwd.name in (tmp_path / "cwd.html").read_text() and from_env.name not in (tmp_path / "cwd.html").read_text()


def test_store_index_of_a_big_store_is_paged_and_links_every_snapshot(browser, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    from _store_helpers import make_run

    from genrun.runner.cli import _store_page

    monkeypatch.setattr(_store_page, "PAGE_SIZE", 2)  # a 100,000-snapshot store in miniature: 1,000 lines a page
    store = tmp_path / "store"
    made = [make_run(store, f"r{i}", status="failed" if i == 3 else "succeeded") for i in range(5)]
    html = tmp_path / "site" / "index.html"
    html.parent.mkdir()
    assert main(["report", "--store", str(store), "--html", str(html)]) == 0
    assert sorted(p.name for p in html.parent.iterdir()) == ["index-2.html", "index-3.html", "index.html"]
    seen: dict[str, str] = {}
    opened = Opened(browser, html)
    try:
        for page in range(3):
            assert opened.errors == []
            text = opened.page.inner_text("body")
            assert "5 snapshot(s)" in text and "not verified here" in text
            links = opened.page.locator("tr.snapshot a")
            seen.update({links.nth(i).inner_text(): links.nth(i).get_attribute("href") for i in range(links.count())})
            if page < 2:  # the page links: the next page by its label
                opened.page.click(f"nav.pages >> text={2 * page + 3}–")
                opened.page.wait_for_load_state("load")
        opened.screenshot(tmp_path / "last-page.png")
    finally:
        opened.close()
    assert set(seen) == {p.name for p in made}  # every snapshot, once, linked to its directory (no review pages written)
    assert all((html.parent / href).resolve() == (store / name).resolve() and href.endswith("/") for name, href in seen.items())


def test_store_pages_mark_a_snapshot_whose_page_cannot_be_made(snapshots, ddim_snapshot: Path, browser, tmp_path: Path,  # noqa: F811
                                                                  monkeypatch, capsys) -> None:
    """A renderer bug that trips on one kind of snapshot (as the diffusers page once did) costs that snapshot's page only:
    its line says why and names `genrun verify ID`; every other page and the index are written."""
    from genrun.analysis.report import Report

    def broken_heading(report: Report) -> str:
        raise TypeError("'dict' object is not callable")  # a bug in the one section only a diffusers page has

    monkeypatch.setattr(Report, "call_config_heading", property(broken_heading))  # only a page with a call-config table trips
    store = tmp_path / "store"
    good, broken = copy_snapshot(snapshots.get("eos"), store), copy_snapshot(ddim_snapshot, store)
    html = tmp_path / "site" / "index.html"
    html.parent.mkdir()
    assert main(["report", "--store", str(store), "--html", str(html), "--pages"]) == 0
    assert "1 could not be made" in capsys.readouterr().err
    assert sorted(p.name for p in html.parent.iterdir()) == ["index.html", "index.pages"]  # no temporary folder left behind
    assert sorted(p.name for p in (html.parent / "index.pages").iterdir()) == [f"{good.name}.html"]
    opened = Opened(browser, html)
    try:
        assert opened.errors == []
        rows = {r.split()[0]: r for r in visible_text(opened, "tr.snapshot")}
        assert set(rows) == {good.name, broken.name}
        assert "review page not written (TypeError: 'dict' object is not callable)" in rows[broken.name]
        assert f"run 'genrun verify {broken.name}'" in rows[broken.name]
        assert opened.page.locator(f"a:text-is('{broken.name}')").get_attribute("href").endswith(f"store/{broken.name}/")
        assert re.search(r"succeeded\s+yes\s+eos\s+\d+\s+0\s+no sign-offs", rows[good.name]), rows[good.name]
    finally:
        opened.close()


def test_store_site_is_replaced_whole_or_left_as_it_was(snapshots, tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: F811
    """A site that fails part-way (here: the disk fills on the second review page) leaves what was there before: no site
    at all the first time, the previous site unchanged later; never a half-filled `index.pages/` or a temporary folder."""
    import errno

    from genrun.analysis import html_report

    store = tmp_path / "store"
    first = copy_snapshot(snapshots.get("eos"), store)
    copy_snapshot(snapshots.get("budget"), store)
    html = tmp_path / "site" / "index.html"
    html.parent.mkdir()
    real_write, writes = html_report.write_html, []

    def filling_disk(text: str, target: Path, forbidden_roots=()) -> Path:
        writes.append(target)
        if len(writes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return real_write(text, target, forbidden_roots)

    def site() -> dict[Path, bytes]:
        return {p.relative_to(html.parent): p.read_bytes() for p in html.parent.rglob("*") if p.is_file()}

    monkeypatch.setattr(html_report, "write_html", filling_disk)
    assert main(["report", "--store", str(store), "--html", str(html), "--pages"]) == 1  # one line naming the OSError
    assert "OSError: [Errno 28] No space left on device" in capsys.readouterr().err
    assert list(html.parent.iterdir()) == []

    monkeypatch.setattr(html_report, "write_html", real_write)
    assert main(["report", "--store", str(store), "--html", str(html), "--pages"]) == 0
    before = site()
    assert main(["signoff", str(first), "--decision", "accept", "--by", "owner@example.com"]) == 0  # its page would change
    writes.clear()
    monkeypatch.setattr(html_report, "write_html", filling_disk)
    assert main(["report", "--store", str(store), "--html", str(html), "--pages"]) == 1  # one line naming the OSError
    assert "OSError: [Errno 28] No space left on device" in capsys.readouterr().err
    assert site() == before
    assert sorted(p.name for p in html.parent.iterdir()) == ["index.html", "index.pages"]


def test_pages_leave_snapshots_untouched_and_never_import_torch(snapshots, tmp_path: Path) -> None:  # noqa: F811
    import subprocess
    import sys

    from _analysis_helpers import tree_state

    store = tmp_path / "store"
    copies = [copy_snapshot(snapshots.get("eos"), store), copy_snapshot(snapshots.killed(), store)]
    before = [tree_state(c) for c in copies]
    probe = ("import sys; from genrun.runner.cli import main; "
             f"codes = [main(['report', {str(copies[0])!r}, '--html', {str(tmp_path / 'a.html')!r}]), "
             f"main(['report', {str(copies[1])!r}, '--html', {str(tmp_path / 'b.html')!r}]), "
             f"main(['report', '--store', {str(store)!r}, '--html', {str(tmp_path / 'i.html')!r}])]; "
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'diffusers', 'numpy')); "
             "assert codes == [0, 0, 0] and heavy == [], (codes, heavy)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [tree_state(c) for c in copies] == before


# -- refusals -----------------------------------------------------------------------------------------------------


def test_refuses_to_write_inside_the_snapshot(snapshots, tmp_path: Path, capsys) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    assert main(["report", str(snapshot), "--html", str(snapshot / "review.html")]) == 1
    assert "analysis never writes into a snapshot" in capsys.readouterr().err
    assert not (snapshot / "review.html").exists()


@pytest.mark.parametrize("argv, message, code", [  # 2: a usage error, found before any snapshot is read; 1: about the snapshot or the file
    (["--store", "{store}"], "for an index page of the store use --html FILE", 2),
    (["--html", "{out}"], "store snapshots does not exist yet (the default: neither --store nor $GENRUN_STORE is set)", 1),  # cwd: tmp_path
    (["no-such-id", "--store", "{store}", "--html", "{out}"], "is neither a directory nor the id", 1),  # --store: where ids are looked up
    (["{snapshot}", "--html", "{out}", "--json"], "cannot be combined", 2),
    (["{snapshot}", "--html", "{missing}/x.html"], "does not exist; create it first", 1),
    (["--store", "{store}", "--html", "{store}", "--pages"], "is a directory; give a file name", 1),  # refused before any page
])
def test_bad_arguments_name_the_fix(snapshots, tmp_path: Path, capsys, monkeypatch, argv, message, code) -> None:  # noqa: F811
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GENRUN_STORE", raising=False)
    values = {"store": str(tmp_path), "out": str(tmp_path / "o.html"), "snapshot": str(snapshots.get("eos")),
              "missing": str(tmp_path / "nope")}
    assert main(["report", *(a.format(**values) for a in argv)]) == code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.html").exists() and not [p for p in tmp_path.parent.iterdir() if p.name.endswith(".pages")]


def test_the_index_rows_escape_exactly_as_html_escape_does() -> None:
    """`_escaped` skips `html.escape` for text with nothing to escape (most cells of a big store's page): the same text
    either way, for every printable character alone and among others."""
    import html
    import string

    from genrun.analysis._html_template import _escaped

    texts = ["", "20260101T000000Z-eval-a1b2c3", "sweep completed", *string.printable, *(f"a{c}b{c}" for c in string.printable),
             "<script>alert('x')</script>", 'say "hi" & bye', "é – 漢字"]
    assert [_escaped(t) for t in texts] == [html.escape(t) for t in texts]
