"""The report as a reader sees it: headless Chromium loads every figure, logs no error, and the page
gets a full-page screenshot (emergence_bench.reporting.browser). Skipped, with the reason, where no
browser is installed; `.ci/run` installs Debian's chromium so that CI runs it."""

import pytest

from emergence_bench.reporting import report
from emergence_bench.reporting.browser import check_page, find_browser
from emergence_bench.engine.run import run

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no headless browser installed (apt-get install chromium)")


def test_every_figure_loads_nothing_logs_an_error_and_the_page_is_captured(tmp_path, tiny_config):
    for sparsity in (1, 2):
        run(tiny_config(task={"name": "linear_map", "state_size": 4, "sparsity": sparsity, "batch_size": 32}), tmp_path)
    page = report.write(tmp_path)
    check = check_page(page, tmp_path / "shot.png")
    assert check.ok, (check.broken, check.errors)
    assert len(check.images) == page.read_text().count("<img ") >= 5
    shot = (tmp_path / "shot.png").read_bytes()
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000


def test_a_broken_figure_and_a_logged_error_are_caught(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><body><img alt='fine' src='data:image/gif;base64,"
                    "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7'>"
                    "<img alt='broken' src='data:image/png;base64,bm90IGEgcG5n'>"
                    "<script>console.error('something went wrong')</script></body></html>")
    check = check_page(page)
    assert not check.ok and check.broken == ["broken"]
    assert any("something went wrong" in e for e in check.errors)


@pytest.mark.slow
def test_report_screenshot_flag(tmp_path, cli, tiny_config):
    run(tiny_config(), tmp_path)
    done = cli("report", tmp_path, "--screenshot")
    assert done.returncode == 0, done.stderr
    assert "all loaded" in done.stdout and (tmp_path / "report.png").is_file()
