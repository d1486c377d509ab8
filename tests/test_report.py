import base64
import re

from emergence_bench.reporting import report
from emergence_bench.run import run
from conftest import cli, tiny_config


def test_report_from_a_small_sweep_has_every_figure(tmp_path):
    for state_size in (4, 5):
        for sparsity in (1, 2):
            run(tiny_config(task={"name": "linear_map", "state_size": state_size, "sparsity": sparsity,
                                  "batch_size": 32}), tmp_path)
    run(tiny_config(mixer={"name": "mlp_mixer"}), tmp_path)
    path = report.write(tmp_path)
    page = path.read_text()
    for heading in ("Leaderboard", "Loss curves", "Emergence steps per mixer",
                    "Final eval loss over task.state_size × task.sparsity",
                    "Attention maps beside the ground truth"):
        assert heading in page, heading
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3 + 4  # curves, emergence, heatmap, then the first 4 groups with attention maps
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG") and len(data) > 1000
    assert "<table>" in page and "mlp_mixer" in page


def test_report_command(tmp_path):
    run(tiny_config(), tmp_path)
    result = cli("report", tmp_path, "--out", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    bad = cli("report", tmp_path, "--axes", "task.state_size")
    assert bad.returncode == 2 and "--axes takes two config keys" in bad.stderr
    empty = cli("report", tmp_path / "nothing")
    assert empty.returncode == 2 and "no result.json" in empty.stderr
