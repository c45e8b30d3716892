"""The committed A/A summary (reports/controls/aa/summary.md) is what the script computes from the
committed run folders: no figure in it was typed by hand."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("runlevel_second_edition",
                                                  REPO / "lab" / "runlevel_second_edition.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_committed_aa_summary_recomputes_exactly_from_the_committed_runs(tmp_path):
    out = tmp_path / "summary.md"
    assert _script().main(["--out", str(out)]) == 0
    assert out.read_text() == (REPO / "reports" / "controls" / "aa" / "summary.md").read_text()


def test_the_readmes_primary_test_power_recomputes_from_the_aa_summarys_components():
    """The README's "the primary test detects about 0.0169 nats per bar at 3 seeds, 0.0065 at 6": the
    crossed test at Holm's first step over question 1's four comparisons (0.05/4), at N=32768's log-loss
    components as the A/A summary prints them."""
    from tsflash.stats.runs import CrossedComponents, crossed_power

    summary = (REPO / "reports" / "controls" / "aa" / "summary.md").read_text()
    (row,) = [line for line in summary.splitlines() if line.startswith("| N=32768 - N=512 | log-loss | 0.000")
              and line.count("|") == 10]
    fold, seed, residual = (float(x) for x in row.split("|")[3:6])
    c = CrossedComponents(fold**2, seed**2, residual**2)
    three, six = (crossed_power(c, 5, s, alpha=0.05 / 4, n_sims=3000).detectable for s in (3, 6))
    assert (round(three, 4), round(six, 4)) == (0.0169, 0.0065)
    readme = (REPO / "README.md").read_text()
    assert "The primary test detects about 0.0169 nats per bar at 3 seeds, 0.0065 at 6" in readme.replace("\n", " ")


def test_every_aa_pair_and_replicate_names_a_committed_run_folder():
    script = _script()
    folders = list(script.REPLICATES.values()) + [p for pair in script.AA_PAIRS.values() for p in pair]
    missing = [f for f in folders if not (REPO / f / "run.json").exists()]
    assert not missing, missing


@pytest.fixture(scope="module")
def tiny_aa(tmp_path_factory):
    """A CPU-sized A/A replicate: the same tiny config on the clean iid null, seeds 0-1 and 2-3."""
    from tests.conftest import one_thread
    from tests.sweep.test_sweep import TINY
    from tsflash import cli

    out = tmp_path_factory.mktemp("aa")
    with one_thread():
        for name, seeds in (("a", "[0, 1]"), ("b", "[2, 3]")):
            argv = ["sweep", "--data", "synthetic:iid:0", "--lengths", "32,64", "--out", str(out / name),
                    "--device", "cpu", "--preset", "cpu", "--no-precision"]
            for item in [*TINY, f"train.seeds={seeds}"]:
                argv += ["--set", item]
            assert cli.main(argv) == 0
    return out


def test_a_cpu_sized_aa_replicate_says_no_difference_and_a_planted_one_differs(tiny_aa):
    script = _script()
    run, replicate = script.Run(tiny_aa / "a"), script.Run(tiny_aa / "b")
    lines, counts = script.replicate_section("tiny iid null", run, replicate)
    assert counts["n"] == 4 and counts["rl"] == 0 and counts["rl_holm"] == 0  # 2 lengths x 2 scores
    assert "seeds 0-1 against seeds 2-3" in lines[0]
    assert counts["splits"] == 4 * 3  # the 2-against-2 splits of 4 seeds, per N and score

    shifted = replicate.runs  # the replicate made worse by 0.05 nats per bar on every run: a true difference

    def worse(key, score):
        r = shifted(key, score)
        return type(r)(r.label, r.fold, r.seed, r.day, r.loss + 0.05 * r.count, r.count)

    replicate.runs = worse
    _, planted = script.replicate_section("tiny iid null, planted", run, replicate)
    assert planted["rl"] == planted["rl_holm"] == planted["n"] == 4
